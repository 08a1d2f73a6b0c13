"""Picking a variant's cells against a published base (design.paired, `design --reuse`, the demo's plan)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from loopscale.cli import main
from loopscale.design.paired import pick_pairs, plan_pairs, power_beyond_offset
from loopscale.errors import UserError
from loopscale.fit.table import load_table

BASE = Path(__file__).resolve().parents[2] / "results" / "laptop-factorial"


def _spread(g: np.ndarray) -> float:
    return float(np.sum((g - g.mean()) ** 2))


def test_the_picked_cells_span_r_and_their_se_is_the_formula():
    table = load_table(BASE / "results.csv")
    slope = -0.1 * np.log(table.r.astype(float))  # a change of φ moves r = 8 three times r = 2
    cost = np.ones(len(table))
    picked = pick_pairs(table, slope, cost, 0.02, count=4)
    rs = {int(table.r[i]) for i in picked.runs}
    assert rs == {2, 8}  # the largest spread of ∂L/∂φ: the two ends
    g = slope[list(picked.runs)]
    assert picked.se == pytest.approx(0.02 / math.sqrt(_spread(g)))
    assert picked.se_alone == pytest.approx(0.02 / math.sqrt(float(np.sum(g**2))))
    assert all(table.r[i] > 1 for i in picked.runs)


def test_a_group_effect_is_not_averaged_away_by_repeating_a_group():
    table = load_table(BASE / "results.csv")
    slope = -0.1 * np.log(table.r.astype(float))
    cost = np.ones(len(table))
    sd, tau = 0.02, 0.03
    picked = pick_pairs(table, slope, cost, sd, cluster_sd=tau, count=6)
    rows = list(picked.runs)
    # independent: the OLS slope is Σ(g_i − ḡ)e_i / S, so its variance is Σ_ij w_i w_j Σ_ij / S²
    g = slope[rows]
    w = g - g.mean()
    keys = [(int(table.r[i]), float(table.width[i])) for i in rows]
    cov = np.array([[sd**2 * (a == b) + tau**2 * (keys[a] == keys[b]) for b in range(6)] for a in range(6)])
    assert picked.se == pytest.approx(math.sqrt(w @ cov @ w) / float(w @ w), rel=1e-9)
    assert picked.se_alone == pytest.approx(math.sqrt(g @ cov @ g) / float(g @ g), rel=1e-9)
    # with a large group effect the cells spread over (r, width) groups rather than repeat one
    spread = pick_pairs(table, slope, cost, 1e-4, cluster_sd=0.05, count=6)
    assert len({(int(table.r[i]), float(table.width[i])) for i in spread.runs}) == 6
    # and the reachable precision has a floor that more runs in the same groups cannot pass
    floor = pick_pairs(table, slope, cost, sd, cluster_sd=tau, count=int(np.sum(table.r > 1)))
    with pytest.raises(UserError, match=r"\(r, width\) groups bound it"):
        pick_pairs(table, slope, cost, sd, cluster_sd=tau, target_half_width=0.9 * floor.half_width)


def test_cost_steers_the_choice_and_a_target_stops_it():
    table = load_table(BASE / "results.csv")
    slope = -0.1 * np.log(table.r.astype(float))
    cost = table.budget / 1e12
    cheap = pick_pairs(table, slope, cost, 0.02, count=4)
    assert {table.budget[i] for i in cheap.runs} == {min(table.budget)}
    target = pick_pairs(table, slope, cost, 0.02, target_half_width=0.1)
    assert target.half_width <= 0.1
    fewer = pick_pairs(table, slope, cost, 0.02, target_half_width=0.3)
    assert len(fewer.runs) < len(target.runs)
    with pytest.raises(UserError, match="at best"):
        pick_pairs(table, slope, cost, 0.02, target_half_width=1e-4)


def test_power_grows_with_the_effect():
    assert power_beyond_offset(0.0, 0.05) == pytest.approx(0.04, abs=1e-9)
    assert power_beyond_offset(0.19, 0.05) > power_beyond_offset(0.08, 0.05) > 0.04


def test_plan_on_the_published_base_uses_its_seed_noise_and_run_times():
    plan = plan_pairs(BASE, count=4, restarts=30)
    assert plan.noise.df == 12 and plan.cost_unit == "s"
    assert plan.sigma_pair == pytest.approx(math.sqrt(2) * plan.noise.sigma)
    assert len({int(plan.table.r[i]) for i in plan.picked.runs}) >= 2


def test_design_reuse_writes_a_variant_spec_with_the_base_seeds(tmp_path, capsys):
    out, doc = tmp_path / "v.yaml", tmp_path / "v.json"
    args = ["design", "--reuse", str(BASE), "--delta-phi", "0.3", "--recipe", "truncated-bptt"]
    assert main([*args, "--out", str(out), "--json", str(doc)]) == 0
    spec = yaml.safe_load(out.read_text())
    cells = json.loads(doc.read_text())["cells"]
    assert len(spec["groups"]) == len(cells) >= 2
    for group, cell in zip(spec["groups"], cells):
        assert (
            group["bptt"] == "ceil_half" and group["seeds"] == [cell["seed"]] and group["rs"] == [cell["r"]]
        )
    assert spec["model"]["vocab_size"] == 1024  # the base's template and data
    assert "half-width" in capsys.readouterr().out


def test_demo_and_design_refuse_bad_input(tmp_path, capsys):
    assert main(["demo", "--max-hours", "0.05", "--out", str(tmp_path / "d")]) == 2
    assert "at least 4 pairs are needed" in capsys.readouterr().err  # 0.05 h buys 2 of the cells
    assert not (tmp_path / "d").exists()  # refused before anything is written
    out = str(tmp_path / "p")
    assert main(["price", "parcae", "--reuse", str(BASE), "--alpha", "0.7", "--out", out]) == 2
    assert "--alpha must be below 0.5" in capsys.readouterr().err
    assert main(["demo", "--base", str(tmp_path / "none"), "--out", str(tmp_path / "d")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["design", "--reuse", str(BASE), "--delta-phi", "-1"]) == 2
    assert "positive" in capsys.readouterr().err
