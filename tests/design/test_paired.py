"""Picking a variant's cells against a published base (design.paired, `design --reuse`, the demo's plan)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from loopscale.cli import main
from loopscale.design.paired import pick_pairs, plan_pairs, power_beyond_offset, read_base, variant_spec
from loopscale.design.separate import Candidates, candidates, columns, criterion, order_cells, separation
from loopscale.errors import UserError
from loopscale.fit.table import load_table
from loopscale.present.price_text import separation_text

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


def test_design_reuse_plan_separate_writes_the_cells_price_would_train_first(tmp_path, capsys):
    """Issue 51: `design --reuse --plan separate --max-hours H` chooses cells as `price --plan separate` does
    (the same greedy order, cut at the same hour cap): the spec's groups are those cells with their base
    runs' seeds, r = 1 cells included for a recipe that changes plain models (hyperconnections)."""
    from loopscale.analysis.price import PriceSettings, pairs_within, plan_order
    from loopscale.recipes import resolve_recipe

    out = tmp_path / "v.yaml"
    args = ["design", "--reuse", str(BASE), "--plan", "separate", "--recipe", "hyperconnections"]
    assert main([*args, "--max-hours", "0.5", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "chosen for the power to name each term per hour" in said and "cosine" in said
    settings = PriceSettings(recipe=resolve_recipe("hyperconnections"), base=BASE, out=tmp_path / "unused",
                             max_hours=0.5, plan="separate")  # fmt: skip
    _, cells, order, hours = plan_order(settings)
    rows = order[: pairs_within(hours, 0.5, settings.workers)]
    t = cells.table
    spec = yaml.safe_load(out.read_text())
    groups = spec["groups"]
    written = [(g["grid"][0]["budget"], g["grid"][0]["widths"][0], g["rs"][0], g["seeds"][0]) for g in groups]
    assert written == [(float(t.budget[i]), int(t.width[i]), int(t.r[i]), int(t.seed[i])) for i in rows]
    assert any(g["rs"] == [1] for g in spec["groups"])
    assert main([*args, "--out", str(tmp_path / "w.yaml")]) == 2  # no --max-hours
    assert "--plan separate picks cells per hour: give --max-hours" in capsys.readouterr().err
    assert main(["design", "--reuse", str(BASE), "--max-hours", "1"]) == 2
    assert "--max-hours caps the separating plan" in capsys.readouterr().err


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


# ---------------------------------------------------------------------------------------------------------
# Plans that separate (design.separate, issue 51)


def _cells(r, width, slope, cost=None) -> Candidates:
    """Candidates at cells of the given r and width (budget 1e12, seed 0), one (r, width) group each key."""
    from loopscale.fit.table import RunTable

    r, width = np.asarray(r), np.asarray(width, float)
    n = len(r)
    table = RunTable(
        run=np.array([f"c{i}" for i in range(n)], object), r=r, n_once=np.ones(n), n_rec=np.ones(n),
        tokens=np.ones(n), loss=np.full(n, np.nan), budget=np.full(n, 1e12), width=width, seed=np.zeros(n),
    )  # fmt: skip
    keys = sorted(set(zip(r.tolist(), width.tolist())))
    cluster = np.array([keys.index(k) for k in zip(r.tolist(), width.tolist())])
    cost = np.ones(n) if cost is None else np.asarray(cost, float)
    return Candidates(table, np.asarray(slope, float), cost, np.zeros(n, bool), cluster, 48.0)


def test_the_criterion_prefers_the_cells_that_separate_at_equal_cost():
    """Two looped cells beside four chosen ones, at one cost: the one whose ∂L/∂φ departs from the offset
    column (lower cosine) lowers the criterion more and is picked; an r = 1 cell pins every model."""
    r = [2, 4, 8, 2, 8, 8, 1]
    width = [32, 48, 64, 64, 32, 80, 48]
    slope = [-0.10, -0.20, -0.30, -0.11, -0.60, -0.31, 0.0]
    c = _cells(r, width, slope)
    start = [0, 1, 2, 3]
    sd, tau = 0.016, 0.02
    picked = order_cells(c, [4, 5], sd, tau, 5, start=start)
    assert picked == (*start, 4)
    spread, near = separation(c, [*start, 4], sd, tau), separation(c, [*start, 5], sd, tau)
    assert spread.cosine < near.cosine and spread.se_delta_phi < near.se_delta_phi
    x = columns(c, np.arange(7))
    assert criterion(x[[*start, 4]], c.cluster[[*start, 4]], sd, tau) < criterion(
        x[[*start, 5]], c.cluster[[*start, 5]], sd, tau
    )
    # without an r = 1 cell every model stays at its prior; with one it is estimable and picked first
    assert separation(c, start, sd, tau).se_every is None
    assert order_cells(c, [5, 6], sd, tau, 5, start=start)[-1] == 6
    # dearer by more than it separates: the cheaper cell
    dear = _cells(r, width, slope, cost=[1, 1, 1, 1, 100, 1, 1])
    assert order_cells(dear, [4, 5], sd, tau, 5, start=start)[-1] == 5


def test_the_plans_printed_separation_is_an_independent_numpy_computation():
    """cosine, condition number and SE of Δφ beyond an offset as ``separation`` gives and the dry run
    prints them: the angle between the offset and ∂L/∂φ columns over the looped pairs, the condition number
    of the two unit columns, the OLS sandwich under Σ = σ²I + τ²ZZᵀ written out entry by entry."""
    c = _cells([1, 2, 4, 8, 2, 8, 1], [32, 32, 48, 64, 80, 48, 64], [0, -0.1, -0.22, -0.31, -0.08, -0.28, 0])
    rows, sd, tau = [0, 1, 2, 3, 4, 5, 6], 0.016, 0.022
    s = separation(c, rows, sd, tau)
    g = c.slope[[1, 2, 3, 4, 5]]
    ones = np.ones(5)
    cos = abs(ones @ g) / (np.linalg.norm(ones) * np.linalg.norm(g))
    unit = np.column_stack([ones / np.linalg.norm(ones), g / np.linalg.norm(g)])
    keys = [(int(c.table.r[i]), float(c.table.width[i])) for i in [1, 2, 3, 4, 5]]
    cov = np.array([[sd**2 * (a == b) + tau**2 * (keys[a] == keys[b]) for b in range(5)] for a in range(5)])
    x = np.column_stack([ones, g])
    bread = np.linalg.inv(x.T @ x)
    se = math.sqrt((bread @ x.T @ cov @ x @ bread)[1, 1])
    assert s.cosine == pytest.approx(cos, rel=1e-9)
    assert s.condition == pytest.approx(np.linalg.cond(unit), rel=1e-9)
    assert s.se_delta_phi == pytest.approx(se, rel=1e-9)
    assert s.plain == 2 and s.extension == 0 and s.se_every is not None
    text = separation_text(s)
    for number in (
        f"cosine {cos:.3f}",
        f"condition number {np.linalg.cond(unit):.2f}",
        f"offset {se:.4f}"[7:],
    ):
        assert number in text


def test_r1_variant_runs_pair_with_the_base_r1_runs(tmp_path):
    """An r = 1 cell of the plan is the variant's own r = 1 run at the base run's (budget, width, seed): its
    sweep group keeps the base's seed, the run contract names the base's r = 1 run, and the pair analysis
    pairs the two (not as the base's shared anchor)."""
    from types import SimpleNamespace

    from loopscale.analysis.price import PriceSettings, _pairs_with, takes_plain
    from loopscale.pairs.effects import match_pairs
    from loopscale.recipes import resolve_recipe
    from loopscale.sweep.plan import plan_sweep

    plan = plan_pairs(BASE, count=4, restarts=30)
    t = plan.table
    plain = [int(i) for i in np.flatnonzero(t.r == 1)][:3]
    looped = [int(i) for i in np.flatnonzero(t.r > 1)][:3]
    order = (*plain, *looped)
    recipe = resolve_recipe("hyperconnections")  # it changes a plain model too
    settings = PriceSettings(recipe=recipe, base=BASE, out=tmp_path / "p", plan="separate")
    spec = variant_spec(plan, settings.recipe, "v", runs=list(order))
    for group, i in zip(spec.groups, order):
        assert group.rs == [int(t.r[i])] and group.seeds == [int(t.seed[i])]
    pairs_with = _pairs_with(settings, SimpleNamespace(pairs=plan, order=order))
    runs = {run.name: run for run in plan_sweep(spec)}
    for name, path in pairs_with.items():
        i = int(np.flatnonzero(t.run == Path(path).name)[0])
        assert (runs[name].budget, runs[name].width, runs[name].r) == (t.budget[i], t.width[i], t.r[i])
    variant = t.subset(np.array(order))
    variant = dataclasses.replace(variant, run=np.array([f"v-{k}" for k in range(len(order))], object))
    pairs = match_pairs(t, variant)
    assert int((~pairs.looped).sum()) == 3 and len(pairs.base) == 6
    # a recipe that needs loops (Parcae's injection) or leaves a plain model as it was (truncated BPTT)
    # makes no r = 1 pair: the plan offers it none
    assert takes_plain(recipe, plan.spec, t)
    assert not takes_plain(resolve_recipe("parcae"), plan.spec, t)
    assert not takes_plain(resolve_recipe("truncated-bptt"), plan.spec, t)


@pytest.fixture(scope="module")
def plan():
    return plan_pairs(BASE, count=4, restarts=30)


def test_extension_cells_are_new_cells_costed_with_their_base_run(plan):
    from loopscale.sweep.results import read_results

    cost = read_base(BASE).cost
    c = candidates(plan, read_results(BASE / "results.csv"), cost, extend=True)
    n = len(plan.table)
    assert not c.extension[:n].any() and c.extension[n:].all()
    base_cells = {(b, w, r) for b, w, r in zip(plan.table.budget, plan.table.width, plan.table.r)}
    new = list(zip(c.table.budget[n:], c.table.width[n:], c.table.r[n:]))
    assert base_cells.isdisjoint(new) and {16.0, 96.0, 128.0} <= set(c.table.width[n:])
    assert max(c.table.budget[n:]) == 2e13 and np.all(c.cost[n:] > 0) and np.all(c.slope[c.table.r == 1] == 0)
    # a measured (width, r) costs its steps at the base's median s/step: twice (the base and variant runs)
    i = next(k for k in range(n, len(c.table)) if c.table.width[k] == 64 and c.table.budget[k] == 2e13)
    assert c.cost[i] > 2 * max(cost[(plan.table.width == 64) & (plan.table.r == c.table.r[i])]) * 0.9


def test_extension_planning_writes_nothing_into_the_base(tmp_path, capsys):
    """--extend refuses a spec path inside the base, an existing file, a run without --dry-run and the
    delta_phi plan, each in one line before anything is fitted; the spec it writes holds the base's template
    and plans only base runs the base lacks."""
    from loopscale.cli.price import _write_extension

    before = sorted((p, p.stat().st_mtime_ns) for p in BASE.rglob("*"))
    args = ["price", "parcae", "--reuse", str(BASE), "--plan", "separate"]
    taken = tmp_path / "taken.yaml"
    taken.write_text("mine\n")
    for extra, said in [
        (["--dry-run", "--extend", str(BASE / "ext.yaml")], "inside the base"),
        (["--dry-run", "--extend", str(taken)], "never overwritten"),
        (["--extend", str(tmp_path / "e.yaml"), "--out", str(tmp_path / "o")], "give it with --dry-run"),
        (["--dry-run", "--plan", "delta_phi", "--extend", str(tmp_path / "e.yaml")], "--plan separate"),
    ]:
        assert main([*args, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as stop:  # argparse's own one line
        main([*args, "--dry-run", "--plan", "bogus"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "invalid choice" in err and len(err.splitlines()) == 1
    assert (
        taken.read_text() == "mine\n" and not (tmp_path / "o").exists() and not (tmp_path / "e.yaml").exists()
    )
    out = tmp_path / "ext" / "ext.yaml"
    out.parent.mkdir()
    cells = [(2e13, 64, 1), (2e13, 64, 8), (3.2e12, 96, 2)]
    _write_extension(out, BASE, cells)
    assert "r = 1 anchors" in capsys.readouterr().out
    spec = yaml.safe_load(out.read_text())
    assert spec["model"] == yaml.safe_load((BASE / "sweep.yaml").read_text())["model"]
    from loopscale.config import from_dict
    from loopscale.sweep.plan import plan_sweep
    from loopscale.sweep.spec import SweepSpec

    runs = plan_sweep(from_dict(SweepSpec, spec, "ext"))
    anchor = (3.2e12, 96, 1)  # the plain run at each new (budget, width): the law check's anchor
    assert sorted((u.budget, u.width, u.r, u.seed) for u in runs) == sorted((*c, 0) for c in [*cells, anchor])
    assert sorted((p, p.stat().st_mtime_ns) for p in BASE.rglob("*")) == before
