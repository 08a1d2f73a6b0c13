"""Named sweeps: the paper's grids (method §5.2–§5.3) and two scaled-down grids for a 2-core CPU.

``paper`` is the exact 116-run main grid; ``paper-truncated-bptt`` and ``paper-hyperconnections`` are the
case-study grids (r ∈ {2, 4, 8} at the four lower budgets) plus the 20 shared r = 1 anchor runs of the main
grid. ``cpu`` and ``laptop`` (and its first, staggered version ``laptop-staggered``) keep the paper's method
(iso-depth layout, iso-FLOP curves that bracket their minima, several r, exact FLOPs accounting, one recipe
for every r) at a scale that runs on 2 CPU cores; ``demo`` is 8 runs of the laptop design at one width that
beat a bigram table, for ``loopscale demo``. Their design and rationale are in docs/sweeps.md.
"""

from __future__ import annotations

import copy
from typing import Any

from loopscale.config import from_dict
from loopscale.errors import UserError
from loopscale.paper import (
    BATCH_TOKENS,
    HYPERCONNECTION_GRID,
    MAIN_GRID,
    RS,
    SEQ_LEN,
    TRUNCATED_BPTT_GRID,
    VOCAB,
)
from loopscale.sweep.spec import SweepSpec

PAPER_WIDTH_UNIT = 64  # d = 64·s (method §2.2)


def _grid(budget_scales: dict[float, tuple[int, ...]], width_unit: int = PAPER_WIDTH_UNIT) -> list[dict]:
    return [{"budget": c, "widths": [width_unit * s for s in scales]} for c, scales in budget_scales.items()]


def _lower_four(grid: dict[float, tuple[int, ...]]) -> dict[float, tuple[int, ...]]:
    """The main grid restricted to the case studies' budgets: the shared r = 1 anchor runs (method §5.3)."""
    return {c: grid[c] for c in sorted(grid)[:4]}


_PAPER_MODEL = {"vocab_size": VOCAB, "seq_len": SEQ_LEN}
_ANCHOR = {"name": "anchor", "rs": [1], "grid": _grid(_lower_four(MAIN_GRID))}
_LOOPED = [r for r in RS if r > 1]

# The scaled-down template shared by `cpu` and `demo`: 10 effective layers, prelude = coda = 1, so the
# 8 recurrent layers divide by r ∈ {1, 2, 4, 8}; head dim 8 so widths from 8 upward in steps of 8 are legal
# (the iso-FLOP minima of 2-core budgets sit at d ≈ 8–32); T = 256 and the default corpus's 4,096-token
# vocabulary.
_CPU_MODEL = {"depth": 10, "prelude": 1, "coda": 1, "head_dim": 8, "vocab_size": 4096, "seq_len": 256}
# The paper's recipe, rescaled as configuration only: the LR-transfer references move to this scale
# (reference width 24 instead of 640, reference batch = this batch, so the base LRs apply unchanged at
# B = 1,024 tokens), the final validation loss covers the same 32,768 held-out tokens for every run, and
# there is no per-step progress bar.
_CPU_TRAIN: dict[str, Any] = {
    "device": "cpu",
    "progress": False,
    "data": {"val_tokens": 32_768},
    "optim": {"ref_width": 24, "ref_batch_tokens": 1024},
}

# The laptop template: the cpu template's depth layout with head dim 16 (head dim 8 costs 20–25 % speed),
# a 1,024-token BPE and T = 128, so the blocks that N counts, not the unembedding and attention, take most
# of the FLOPs at the widths a 2-core budget can afford (pilot: docs/sweeps.md).
_LAPTOP_MODEL = {"depth": 10, "prelude": 1, "coda": 1, "head_dim": 16, "vocab_size": 1024, "seq_len": 128}
_LAPTOP_TRAIN: dict[str, Any] = {
    "device": "cpu",
    "progress": False,
    "data": {"path": "data/packed/default-bpe1024-T128", "val_tokens": 131_072},
    # `loopscale lr-sweep --preset laptop --budget 4.3e12 --widths 32 64 --rs 1 4 --multipliers 1 2 4 8`
    # (results/laptop-lr/lr_calibration.json): shared multiplier 2.5 on every base LR, bracketed, regret
    # ≤ 0.007 nats for each (width, r) against its own best multiplier.
    "optim": {
        "ref_width": 48,
        "ref_batch_tokens": 4096,
        "matrix_lr": 0.035,
        "embed_lr": 0.75,
        "unembed_lr": 0.01,
        "norm_lr": 0.0125,
        "hc_lr": 0.025,
    },
}

# The factorial laptop sweep's budgets: 3.9× in three steps of ≈ 1.57× (FLOPs).
_LAPTOP_BUDGETS = (3.2e12, 5.0e12, 8.0e12, 1.25e13)
_LAPTOP_WIDTHS = [32, 48, 64]
# A d = 80 column at the top two budgets, added after the factorial ran: its iso-FLOP minima at 1.25e13 sat
# at d = 64 (r = 1, 4, 8), the widest width run, and the paper finds the truncated-BPTT optimum wider still.
_LAPTOP_WIDE = [{"budget": c, "widths": [80]} for c in _LAPTOP_BUDGETS[2:]]
# The factorial's replicate cells: seed 1 at (budget index, width) for r ∈ {1, 4} and for r ∈ {2, 8}.
_LAPTOP_SEED1_A = [(0, 32), (1, 48), (2, 64)]
_LAPTOP_SEED1_B = [(1, 32), (2, 48), (3, 64)]
# The demo's budgets (FLOPs) per loop count, each r from about the lowest budget at which d = 32 beats the
# bigram table (measured: r = 1 at 1.1e12 scored 4.059 against 4.078, the closest of the 8; a rerun on
# another machine agrees to ≈ 1e-4 nats); r = 1 and r = 2 share 1.6e12, so r is compared at one budget.
DEMO_BUDGETS = {1: (1.1e12, 1.25e12, 1.4e12, 1.6e12), 2: (1.6e12, 1.8e12), 4: (2.0e12,), 8: (2.0e12,)}


def _laptop_factorial() -> list[dict]:
    return [{"budget": c, "widths": list(_LAPTOP_WIDTHS)} for c in _LAPTOP_BUDGETS]


def _laptop_cells(cells: list[tuple[int, int]]) -> list[dict]:
    return [{"budget": _LAPTOP_BUDGETS[i], "widths": [w]} for i, w in cells]


def _laptop_case_study(name: str, variant: dict[str, Any]) -> dict[str, Any]:
    """A case-study arm on the laptop design (docs/sweeps.md, "Case studies"): the variant at r ∈ {2, 4, 8}
    on every (budget, width) cell of the `laptop` preset (its d = 80 column included) and on the same nine
    seed-1 replicate cells as the base at r > 1; the r = 1 anchors are the base sweep's own runs, reused from
    results/laptop-factorial (identical configs, not retrained). ``variant``: the group keys that make the
    variant (``bptt`` or ``model``)."""
    grid = _laptop_factorial()
    grid[2:] = [{"budget": c, "widths": [*_LAPTOP_WIDTHS, 80]} for c in _LAPTOP_BUDGETS[2:]]
    return {
        "name": name,
        "batch_tokens": 2048,
        "model": _LAPTOP_MODEL,
        "train": _LAPTOP_TRAIN,
        "reuse": ["results/laptop-factorial"],
        "groups": [
            {"name": "main", "rs": [1], "grid": _laptop_factorial()},
            {"name": "seed1-a", "rs": [1], "seeds": [1], "grid": _laptop_cells(_LAPTOP_SEED1_A)},
            {"name": "wide", "rs": [1], "grid": _LAPTOP_WIDE},
            {"name": name.removeprefix("laptop-"), "rs": _LOOPED, "grid": grid, **variant},
            {"name": "seed1-v4", "rs": [4], "seeds": [1], "grid": _laptop_cells(_LAPTOP_SEED1_A), **variant},
            {
                "name": "seed1-v28",
                "rs": [2, 8],
                "seeds": [1],
                "grid": _laptop_cells(_LAPTOP_SEED1_B),
                **variant,
            },
        ],
    }

PRESETS: dict[str, dict[str, Any]] = {
    "paper": {
        "name": "paper",
        "batch_tokens": BATCH_TOKENS,
        "model": _PAPER_MODEL,
        "groups": [{"name": "main", "rs": list(RS), "grid": _grid(MAIN_GRID)}],
    },
    "paper-truncated-bptt": {
        "name": "paper-truncated-bptt",
        "batch_tokens": BATCH_TOKENS,
        "model": _PAPER_MODEL,
        "groups": [
            _ANCHOR,
            {
                "name": "truncated-bptt",
                "rs": _LOOPED,
                "grid": _grid(TRUNCATED_BPTT_GRID),
                "bptt": "ceil_half",
            },
        ],
    },
    "paper-hyperconnections": {
        "name": "paper-hyperconnections",
        "batch_tokens": BATCH_TOKENS,
        "model": _PAPER_MODEL,
        "groups": [
            _ANCHOR,
            {
                "name": "hyperconnections",
                "rs": _LOOPED,
                "grid": _grid(HYPERCONNECTION_GRID),
                "model": {"injection": "hyperconnect"},
            },
        ],
    },
    # ≈ 50–60 min on 2 cores with 2 workers (docs/sweeps.md): 3 budgets spanning 10×, 4 widths each, 4 r.
    "cpu": {
        "name": "cpu",
        "batch_tokens": 1024,  # 4 rows × T = 256
        "model": _CPU_MODEL,
        "train": _CPU_TRAIN,
        "groups": [
            {
                "name": "main",
                "rs": list(RS),
                "grid": [
                    {"budget": 2e11, "widths": [8, 16, 24, 32]},
                    {"budget": 6.3e11, "widths": [8, 16, 24, 32]},
                    {"budget": 2e12, "widths": [16, 24, 32, 48]},
                ],
            }
        ],
    },
    # The laptop sweep (docs/sweeps.md): a width × budget factorial, so that a φ that moves with budget can be
    # told from one that moves with width. Widths 32/48/64 at every budget: the measured iso-FLOP minima of
    # results/laptop (d* ≈ 31–33 at 2.5e12, 35–40 at 4.3e12, 42–47 at 7.3e12, 48–52 at 1.25e13) lie inside
    # 32–64 from 2.5e12 up; d = 16 is above the bigram table at r ≥ 4; at 3.2e12 d = 64 is predicted ≤ 3.99
    # nats at every r (bigram 4.078; r = 8 scored 4.038 at 2.9e12). 1.25e13 is the highest budget at which
    # d = 32 reads each training token at most once. Twelve replicate runs (seed 1) spread over every r,
    # budget and width pin the seed noise for the law check's lack-of-fit test; the fit pools them with seed 0
    # by (budget, width, r). The recipe is the first sweep's: the pilots of a shared per-r LR and of head
    # dim 8 did not reduce the r × width misfit (results/laptop-pilots/analysis.md). ≈ 2.8 h on 2 idle cores
    # with 2 workers × 1 thread (`loopscale plan --preset laptop --timings results/laptop/results.csv`).
    "laptop": {
        "name": "laptop",
        "batch_tokens": 2048,  # 16 rows × T = 128
        "model": _LAPTOP_MODEL,
        "train": _LAPTOP_TRAIN,
        "groups": [
            {
                "name": "main",
                "rs": list(RS),
                "grid": _laptop_factorial(),
            },
            {"name": "seed1-a", "rs": [1, 4], "seeds": [1], "grid": _laptop_cells(_LAPTOP_SEED1_A)},
            {"name": "seed1-b", "rs": [2, 8], "seeds": [1], "grid": _laptop_cells(_LAPTOP_SEED1_B)},
            # added after the first 60 runs (the folder grows: `loopscale sweep --preset laptop` extends it)
            {"name": "wide", "rs": list(RS), "grid": _LAPTOP_WIDE},
        ],
    },
    # The paper's two case studies (method §5.3) on the laptop design: truncated BPTT (k = ⌈r/2⌉) and
    # loop-level hyperconnections (K = 2, static, at the loop boundary).
    "laptop-truncated-bptt": _laptop_case_study("laptop-truncated-bptt", {"bptt": "ceil_half"}),
    "laptop-hyperconnections": _laptop_case_study(
        "laptop-hyperconnections", {"model": {"injection": "hyperconnect"}}
    ),
    # The first laptop grid, staggered (wider widths at higher budgets): the record of results/laptop (its
    # sweep.yaml), and the reference grid that `loopscale design` was measured against (docs/design.md).
    "laptop-staggered": {
        "name": "laptop",
        "batch_tokens": 2048,
        "model": _LAPTOP_MODEL,
        "train": _LAPTOP_TRAIN,
        "groups": [
            {
                "name": "main",
                "rs": list(RS),
                "grid": [
                    {"budget": 2.5e12, "widths": [16, 32, 48, 64]},
                    {"budget": 4.3e12, "widths": [16, 32, 48, 64, 80]},
                    {"budget": 7.3e12, "widths": [32, 48, 64, 80]},
                    {"budget": 1.25e13, "widths": [32, 48, 64, 80, 96]},
                ],
            }
        ],
    },
    # The demo (docs/sweeps.md): the laptop design's template, recipe and calibrated LR below its lowest
    # budget, where only d = 32 beats the bigram table (4.078 nats on the laptop's 131,072 validation
    # tokens), each r from where it does (measured 4.059–3.912 nats, docs/sweeps.md): 8 runs, 1.28e13
    # FLOPs, the fewest that the joint law (7 runs) and its law check (one spare degree of freedom) accept.
    "demo": {
        "name": "demo",
        "batch_tokens": 2048,
        "model": _LAPTOP_MODEL,
        "train": _LAPTOP_TRAIN,
        "groups": [
            {"name": f"r{r}", "rs": [r], "grid": [{"budget": c, "widths": [32]} for c in budgets]}
            for r, budgets in DEMO_BUDGETS.items()
        ],
    },
}


def preset(name: str) -> SweepSpec:
    """The named preset as a validated SweepSpec (a fresh copy each call)."""
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return from_dict(SweepSpec, copy.deepcopy(PRESETS[name]), f"preset {name}")
