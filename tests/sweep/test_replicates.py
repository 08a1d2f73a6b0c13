"""Replicate seeds on a subset of a sweep (a group's own ``seeds``) and the factorial `laptop` preset."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml

from loopscale.config import from_dict
from loopscale.errors import UserError
from loopscale.fit.table import load_table
from loopscale.sweep.plan import plan_sweep
from loopscale.sweep.presets import preset
from loopscale.sweep.rundir import init_sweep, open_sweep
from loopscale.sweep.spec import SweepSpec

SPEC = {
    "name": "tiny",
    "batch_tokens": 256,
    "model": {"depth": 4, "prelude": 1, "coda": 1, "head_dim": 16, "vocab_size": 64, "seq_len": 16},
    "groups": [
        {"name": "main", "rs": [1, 2], "grid": [{"budget": 1e9, "widths": [16, 32]}]},
        {"name": "seed1", "rs": [2], "seeds": [1], "grid": [{"budget": 1e9, "widths": [32]}]},
    ],
}


def test_a_group_with_its_own_seeds_replicates_cells_of_the_main_grid():
    runs = plan_sweep(from_dict(SweepSpec, SPEC, "spec"))
    assert [(r.name, r.seed) for r in runs if r.group == "seed1"] == [("seed1_C1e9_d32_r2", 1)]
    assert {r.seed for r in runs if r.group == "main"} == {0}  # the sweep's seeds where a group sets none
    cells = Counter((r.budget, r.width, r.r) for r in runs)
    assert cells[(1e9, 32, 2)] == 2 and sum(cells.values()) == 5
    # the fit pools the two seeds as one (budget, r) cell: different runs, not a duplicate
    rows = [
        {
            "run": r.name,
            "budget": r.budget,
            "width": r.width,
            "r": r.r,
            "n_once": r.n_once,
            "n_rec": r.n_rec,
            "tokens": r.tokens,
            "loss": 3.0 + 0.01 * i,
        }
        for i, r in enumerate(runs)
    ]
    index, keys = load_table(rows).cells()
    assert len(keys) == 2 and len(set(index.tolist())) == 2


@pytest.mark.parametrize("seeds", [[], [1, 1]])
def test_a_groups_seeds_must_be_distinct_and_not_empty(seeds):
    spec = {**SPEC, "groups": [SPEC["groups"][0], {**SPEC["groups"][1], "seeds": seeds}]}
    with pytest.raises(UserError, match="group 'seed1': seeds must be a non-empty list of distinct"):
        from_dict(SweepSpec, spec, "spec")


def test_a_sweep_written_before_groups_had_seeds_still_reopens(tmp_path, tiny_dataset):
    """sweep.yaml files written before the field existed have no ``seeds`` key in their groups: reopening
    (resume) compares specs, not text, so they resume; a really different spec is still refused."""
    train = {"data": {"path": str(tiny_dataset)}, "optim": {"ref_r_looped": 2}}
    spec = {**SPEC, "groups": [SPEC["groups"][0]], "train": train}
    out = tmp_path / "sweep"
    init_sweep(from_dict(SweepSpec, spec, "spec"), out)
    old_text = (out / "sweep.yaml").read_text().replace("  seeds: null\n", "")
    assert "seeds: null" not in old_text
    (out / "sweep.yaml").write_text(old_text)
    reopened, runs = open_sweep(out)
    assert len(init_sweep(reopened, out)) == len(runs) == 4
    assert (out / "sweep.yaml").read_text() == old_text  # left as it was
    other = {**spec, "batch_tokens": 512}
    with pytest.raises(UserError, match="already holds a different sweep"):
        init_sweep(from_dict(SweepSpec, other, "spec"), out)


def test_laptop_is_a_width_by_budget_factorial_with_replicates_over_every_r_and_budget():
    """docs/sweeps.md: the same widths at every budget (plus a d = 80 column at the top two); ≥ 8 seed-1
    replicates of main-grid cells that cover every r, every budget and every width; no run repeats
    training data; the staggered grid keeps the committed results/laptop spec."""
    spec = preset("laptop")
    runs = plan_sweep(spec)
    main = [r for r in runs if r.group == "main"]
    widths = {b: sorted({r.width for r in main if r.budget == b}) for b in {r.budget for r in main}}
    assert len(widths) == 4 and all(w == [32, 48, 64] for w in widths.values())
    full = {(b, w, k) for b in widths for w in widths[b] for k in (1, 2, 4, 8)}
    assert {(r.budget, r.width, r.r) for r in main} == full
    reps = [r for r in runs if r.group.startswith("seed1")]
    wide = [r for r in runs if r.group == "wide"]  # the d = 80 column added at the top two budgets
    assert {(r.budget, r.width) for r in wide} == {(8e12, 80), (1.25e13, 80)} and {r.r for r in wide} == {
        1,
        2,
        4,
        8,
    }
    assert len(reps) >= 8 and {r.seed for r in reps} == {1} and {r.seed for r in main} == {0}
    assert {(r.budget, r.width, r.r) for r in reps} <= {(r.budget, r.width, r.r) for r in main}
    assert {r.r for r in reps} == {1, 2, 4, 8} and {r.budget for r in reps} == set(widths)
    assert {r.width for r in reps} == {32, 48, 64}
    assert max(r.tokens for r in runs) <= 8_835_984
    staggered = preset("laptop-staggered")
    committed = yaml.safe_load(open("results/laptop/sweep.yaml"))
    assert from_dict(SweepSpec, committed, "results/laptop/sweep.yaml") == staggered
