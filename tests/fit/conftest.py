"""Shared data for the fitter tests: the paper's simulated 116-run grid and Epoch's Chinchilla extraction."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from loopscale.config import ModelConfig
from loopscale.fit import load_table
from loopscale.fit.law import law_loss
from loopscale.paper import JOINT_FIT, MAIN_GRID, grid_runs

# Epoch AI's extraction of the Chinchilla runs (provenance in data/README.md).
CHINCHILLA_CSV = Path(__file__).resolve().parent / "data" / "chinchilla_svg_extracted.csv"


def simulated_grid(noise: float = 0.0, seed: int = 0, grid=MAIN_GRID, coef=JOINT_FIT) -> list[dict]:
    """The 116 runs of method §5.2 with losses from the published joint law (+ Gaussian noise in nats)."""
    rng = np.random.default_rng(seed)
    runs = grid_runs(grid)
    for run in runs:
        run["run"] = f"C{run['budget']:.3g}-d{run['width']}-r{run['r']}"
        loss = float(law_loss(coef, run["n_once"], run["n_rec"], run["r"], run["tokens"]))
        run["loss"] = loss + noise * rng.standard_normal() if noise else loss
        run["status"] = "ok"
    return runs


# The `demo` preset's grid (3 budgets × 3 widths × r ∈ {1, 2, 4}, widths 8–32, spec-style CPU template).
DEMO_TEMPLATE = ModelConfig(depth=10, prelude=1, coda=1, head_dim=8, vocab_size=4096, seq_len=256)
DEMO_GRID = {4e10: (1, 2, 3), 1.26e11: (1, 2, 3), 4e11: (2, 3, 4)}


def demo_like_grid(noise: float = 0.05, seed: int = 0) -> list[dict]:
    """27 demo-sized runs whose losses barely move (near the unigram level, ~6.5 nats), depend on tokens
    only and carry ``noise`` nats of Gaussian noise: nothing in them pins down φ (or α)."""
    rng = np.random.default_rng(seed)
    runs = grid_runs(DEMO_GRID, rs=(1, 2, 4), template=DEMO_TEMPLATE, batch_tokens=1024, width_unit=8)
    for run in runs:
        run["run"] = f"main_C{run['budget']:.3g}_d{run['width']}_r{run['r']}"
        run["loss"] = 6.3 + 30 * run["tokens"] ** -0.3 + noise * rng.standard_normal()
        run["status"] = "ok"
    return runs


@pytest.fixture(scope="session")
def grid_table():
    return load_table(simulated_grid())


def chinchilla_rows() -> dict[str, np.ndarray]:
    """Epoch's Approach-3 data: D = C/(6N), the 5 highest losses dropped (240 runs)."""
    with CHINCHILLA_CSV.open() as fh:
        rows = list(csv.DictReader(fh))
    n = np.array([float(r["Model Size"]) for r in rows])
    c = np.array([float(r["Training FLOP"]) for r in rows])
    loss = np.array([float(r["loss"]) for r in rows])
    keep = np.sort(np.argsort(loss)[:-5])
    return {"params": n[keep], "tokens": c[keep] / (6 * n[keep]), "loss": loss[keep], "budget": c[keep]}


@pytest.fixture(scope="session")
def chinchilla_table():
    return load_table(chinchilla_rows())
