"""``loopscale design``: the Fisher (sandwich) SE, the constraints, the emitted spec, simulation, --from."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopscale import design as d
from loopscale.cli import main
from loopscale.config import dump_yaml
from loopscale.design import delta_phi, simulation
from loopscale.design.results import (
    ConstraintProblem,
    DesignConstraints,
    DesignRow,
    PowerSimulation,
    Realisation,
)
from loopscale.errors import UserError
from loopscale.fit.law import Design, objective_and_gradient
from loopscale.paper import JOINT_FIT, MAIN_GRID
from loopscale.present.design_text import agreement_text, problem_text
from loopscale.sweep import load_spec, plan_sweep, preset
from loopscale.sweep.plan import MeasuredTimes
from loopscale.sweep.rundir import RESULT_FILE, SPEC_FILE, open_sweep, run_dir

BUDGETS = sorted(MAIN_GRID)
RESULTS = Path(__file__).resolve().parents[2] / "results"
LAPTOP_RESULTS = Path(__file__).resolve().parents[2] / "results" / "laptop" / "results.csv"


@pytest.fixture(scope="module")
def paper():
    prior = d.load_prior("paper")
    cands = d.candidates_from_spec(preset("paper"))
    return prior, cands, d.Information.build(prior, cands)


def test_jacobian_equals_finite_differences_of_the_log_law(paper):
    prior, cands, info = paper
    cols = cands.columns()
    step = 1e-6
    for k in range(6):
        up, down = prior.theta.copy(), prior.theta.copy()
        up[k] += step
        down[k] -= step
        fd = [np.log(d.Prior(t, 0.01, "").loss(**cols)) for t in (up, down)]
        np.testing.assert_allclose(info.jac[:, k], (fd[0] - fd[1]) / (2 * step), rtol=1e-6, atol=1e-9)


def test_sandwich_bread_is_the_hessian_of_the_fit_objective(paper):
    """Independent of the Jacobian: the finite-difference Hessian of the fit's least-squares objective at the
    noise-free truth is the Gauss-Newton matrix JᵀJ that the sandwich assembles (bread with P = 1)."""
    prior, cands, info = paper
    cols = cands.columns()
    design = Design.build(**cols, loss=info.loss)
    design = Design(**{**design.__dict__, "delta": math.inf})
    step = 1e-5
    hess = np.empty((6, 6))
    for k in range(6):
        up, down = prior.theta.copy(), prior.theta.copy()
        up[k] += step
        down[k] -= step
        g_up = objective_and_gradient(up[None, :], design)[1][0]
        g_down = objective_and_gradient(down[None, :], design)[1][0]
        hess[:, k] = (g_up - g_down) / (2 * step)
    ones = np.ones(len(cands.runs))
    gauss_newton = (info.jac * ones[:, None]).T @ info.jac
    np.testing.assert_allclose(hess, gauss_newton, rtol=1e-4, atol=1e-6 * np.abs(gauss_newton).max())


def test_huber_moments_equal_monte_carlo():
    rng = np.random.default_rng(0)
    for scale in (3e-4, 1e-3, 3e-3, 1e-2):
        eps = scale * rng.standard_normal(400_000)
        inside, meat = d.huber_moments(np.array(scale))
        assert inside == pytest.approx(np.mean(np.abs(eps) <= 1e-3), abs=3e-3)
        assert meat == pytest.approx(np.mean(np.clip(eps, -1e-3, 1e-3) ** 2), rel=1e-2)


def test_paper_grid_predictions_match_the_issue_measurements(paper):
    """The asymptotic φ CI widths of issue 13 (σ = 0.01): all 116 runs 0.072, no top budget 0.077, r ∈ {1, 8}
    0.079 (the reported 0.086 for budgets ≤ 4.64e18 is 0.083 here)."""
    _, cands, info = paper
    width = {
        "all": info.ci_widths(np.ones(len(cands.runs)))["phi"],
        "no top": info.ci_widths((cands.budget < BUDGETS[-1]).astype(float))["phi"],
        "r18": info.ci_widths(np.isin(cands.r, [1, 8]).astype(float))["phi"],
    }
    assert width["all"] == pytest.approx(0.072, abs=0.001)
    assert width["no top"] == pytest.approx(0.0755, abs=0.0015)
    assert width["r18"] == pytest.approx(0.079, abs=0.001)
    # one r only: φ is not identified, the SE is infinite
    assert math.isinf(info.ci_widths((cands.r == 1).astype(float))["phi"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # 1e19 is left out: under the prior its r > 1 minima lie above the §5.2 widths (no bracketing window)
    budgets=st.lists(st.sampled_from([b for b in BUDGETS if b != 1e19]), min_size=2, max_size=4, unique=True),
    rs=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=2, max_size=4, unique=True),
    per_budget=st.sampled_from(d.PER_BUDGET),
    replicates=st.integers(1, 2),
)
def test_every_point_of_the_greedy_path_keeps_the_constraints(paper, budgets, rs, per_budget, replicates):
    prior, _, _ = paper
    cands = d.candidates_from_spec(preset("paper"), budgets=budgets, rs=rs)
    info = d.Information.build(prior, cands)
    constraints = d.Constraints(per_budget=per_budget)
    try:
        path = d.greedy_path(cands, info, constraints, replicates=replicates)
    except Exception as exc:  # a cell with no bracketing window at an end budget is a UserError, not a bug
        assert type(exc).__name__ == "UserError" and "brackets" in str(exc)
        return
    flops = [p.flops for p in path]
    assert flops == sorted(flops) and len(set(flops)) == len(flops)
    for p in path[:: max(1, len(path) // 6)] + path[-1:]:
        assert d.check_design(cands, info, p.design, constraints) == []
        assert p.flops == pytest.approx(cands.flops[p.design.idx].sum() * replicates)
        ends = {cands.budget.min(), cands.budget.max()}
        assert ends <= set(cands.budget[p.design.idx].tolist())


def test_a_maximum_budget_ratio_leaves_no_gap_on_either_path():
    """With --max-budget-ratio 5 every design of both paths keeps neighbouring budgets ≤ 5x apart (the
    smallest bridges 4.64e17 → 2.15e19 with the fewest inner budgets); without it the smallest design holds
    the two ends alone, 46x apart, and check_design names that gap under the ratio."""
    prior = d.load_prior("paper")
    budgets = [b for b in BUDGETS if b != 1e19]
    cands = d.candidates_from_spec(preset("paper"), budgets=budgets, rs=[1, 8])
    info = d.Information.build(prior, cands)
    rule = d.Constraints(max_budget_ratio=5.0)
    for search in (d.greedy_path, d.pruning_path):
        path = search(cands, info, rule)
        for point in path:
            included = sorted(set(cands.budget[point.design.idx].tolist()))
            assert max(b / a for a, b in zip(included, included[1:])) <= 5.0
            assert d.check_design(cands, info, point.design, rule) == []
    smallest = sorted(set(cands.budget[d.greedy_path(cands, info, rule)[0].design.idx].tolist()))
    assert smallest == [BUDGETS[0], BUDGETS[2], BUDGETS[3], BUDGETS[5]]
    free = d.greedy_path(cands, info)[0].design
    assert sorted(set(cands.budget[free.idx].tolist())) == [BUDGETS[0], BUDGETS[5]]
    (gap,) = d.check_design(cands, info, free, rule)
    assert gap == ConstraintProblem("budget_gap", BUDGETS[0], budget_hi=BUDGETS[5], limit=5.0)
    assert problem_text(gap) == (
        f"budgets {BUDGETS[0]:.3g} and {BUDGETS[5]:.3g} are {BUDGETS[5] / BUDGETS[0]:.2f}x apart > 5x"
    )
    with pytest.raises(UserError, match="no candidate budget between"):
        d.greedy_path(cands, info, d.Constraints(max_budget_ratio=1.5))


def test_check_design_names_broken_constraints(paper):
    _, cands, info = paper
    top = np.flatnonzero(cands.budget == BUDGETS[-1])
    thin = np.flatnonzero((cands.budget == BUDGETS[0]) & (cands.width <= 512))
    problems = d.check_design(cands, info, d.RunDesign(np.concatenate([top, thin])), d.Constraints())
    assert any("has 2 width(s) < 3" in problem_text(p) for p in problems)
    (missing,) = d.check_design(cands, info, d.RunDesign(top), d.Constraints())
    assert missing == ConstraintProblem("end_budget_missing", BUDGETS[0])
    assert problem_text(missing) == f"budget {BUDGETS[0]:.3g} (an end of the range) is not included"


def test_constraint_problems_are_records_worded_as_before_and_old_documents_still_read():
    """Issue 49 (7): check_design returns codes and numbers (``ConstraintProblem``), worded in
    present.design_text exactly as the sentences design.json held before; a document written then (its
    problems sentences: results/design/power-paper.json) still reads, each sentence printed as written."""
    problems = (
        ConstraintProblem("end_budget_missing", 4.64e17),
        ConstraintProblem("budget_gap", 4.64e17, budget_hi=2.15e19, limit=5.0),
        ConstraintProblem("budget_lacks_r", 1e19, lacking=(2, 8)),
        ConstraintProblem("thin_cell", 4.64e17, r=4, widths=2, limit=3.0),
        ConstraintProblem("not_bracketed", 4.64e18, r=8, reason="above_widths"),
    )
    assert [problem_text(p) for p in problems] == [
        "budget 4.64e+17 (an end of the range) is not included",
        "budgets 4.64e+17 and 2.15e+19 are 46.34x apart > 5x",
        "budget 1e+19 lacks r = [2, 8]",
        "cell (4.64e+17, r=4) has 2 width(s) < 3",
        "cell (4.64e+18, r=8) does not bracket its predicted minimum: vertex above the widest width run: the "
        "minimum is not bracketed",
    ]
    rules = DesignConstraints(min_widths=3, per_budget="all", max_budget_ratio=None, problems=problems)
    assert DesignConstraints.from_dict(json.loads(json.dumps(rules.to_dict()))) == rules
    published = json.loads((RESULTS / "design" / "power-paper.json").read_text())
    problems = published["reference_constraint_problems"]  # (the file predates max_budget_ratio)
    old = DesignConstraints.from_dict(
        {"max_budget_ratio": None, **published["constraints"], "problems": problems}
    )
    assert [problem_text(p) for p in old.problems] == problems
    assert old.problems[0].startswith("cell (4.64e+18, r=8) does not bracket")


def test_cli_writes_a_spec_the_sweep_loader_runs(tmp_path, capsys):
    out, doc_path = tmp_path / "design.yaml", tmp_path / "design.json"
    code = main(
        [
            "design",
            "--preset",
            "paper",
            "--no-probe",
            "--flop-fraction",
            "0.4",
            "--out",
            str(out),
            "--json",
            str(doc_path),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "design" in text and "reference" in text and "delta-phi power" in text
    spec = load_spec(out)
    doc = json.loads(doc_path.read_text())
    runs = plan_sweep(spec)
    assert len(runs) == doc["design"]["runs"]
    assert sum(r.total_flops for r in runs) == pytest.approx(doc["design"]["flops"])
    assert doc["design"]["flops"] <= 0.4 * doc["reference_grid"]["flops"]
    assert doc["constraints"]["problems"] == []
    assert spec.model == preset("paper").model and spec.batch_tokens == preset("paper").batch_tokens
    assert doc["design"]["predicted_ci"]["phi"] > doc["reference_grid"]["predicted_ci"]["phi"] * 0.5


def test_budgets_between_the_references_take_the_enclosing_widths(tmp_path, capsys):
    """A budget the reference lacks is a new iso-FLOP curve: inside the range it offers the widths of the two
    reference budgets around it; the emitted spec plans it; outside the range it needs --widths."""
    laptop = preset("laptop-staggered")
    grid = {c.budget: c.widths for c in laptop.groups[0].grid}
    cands = d.candidates_from_spec(laptop, budgets=[2.5e12, 3.3e12, 1.25e13])
    new = sorted({int(w) for w in cands.width[cands.budget == 3.3e12]})
    assert new == sorted(set(grid[2.5e12]) | set(grid[4.3e12]))
    assert sorted(set(cands.budget)) == [2.5e12, 3.3e12, 1.25e13]
    assert sorted({int(w) for w in cands.width[cands.budget == 1.25e13]}) == grid[1.25e13]
    assert all(math.isclose(run.total_flops, run.budget, rel_tol=0.1) for run in cands.runs)
    with pytest.raises(UserError, match="outside group 'main'.*--widths"):
        d.candidates_from_spec(laptop, budgets=[1e12, 2.5e12])
    wide = d.candidates_from_spec(laptop, budgets=[1e12, 2.5e12], widths=[16, 32, 48])
    assert sorted({int(w) for w in wide.width}) == [16, 32, 48]

    out = tmp_path / "design.yaml"
    prior = str(LAPTOP_RESULTS)  # the paper's law puts the laptop minima outside its widths
    args = ["design", "--preset", "laptop-staggered", "--prior", prior, "--no-probe", "--out", str(out)]
    assert main([*args, "--budgets", "2.5e12", "3.3e12", "4.3e12", "--flop-cap", "1e14"]) == 0
    budgets = {run.budget for run in plan_sweep(load_spec(out))}
    assert min(budgets) == 2.5e12 and max(budgets) == 4.3e12
    capsys.readouterr()
    assert main([*args, "--budgets", "1e12", "2.5e12", "--flop-cap", "1e14"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outside group" in err[0]


def test_cli_timings_cost_runs_from_a_finished_sweeps_run_times(tmp_path, capsys):
    """--timings replaces the probe: the reference's and the design's est. wall are the sums of
    ``MeasuredTimes`` shares of their runs, and the output says where the estimate came from."""
    out, doc_path = tmp_path / "design.yaml", tmp_path / "design.json"
    args = ["design", "--preset", "laptop-staggered", "--prior", str(LAPTOP_RESULTS), "--no-probe"]
    args += ["--cost", "wall"]
    code = main(
        [*args, "--timings", str(LAPTOP_RESULTS), "--workers", "2", "--flop-fraction", "0.6"]
        + ["--out", str(out), "--json", str(doc_path)]
    )
    assert code == 0
    assert f"est. wall from the measured run times of {LAPTOP_RESULTS}" in capsys.readouterr().out
    doc = json.loads(doc_path.read_text())
    times = MeasuredTimes.from_table(LAPTOP_RESULTS, workers=2)
    reference = sum(times.wall_shares(plan_sweep(preset("laptop-staggered"))))
    assert doc["reference_grid"]["est_seconds"] == pytest.approx(reference)
    assert doc["design"]["est_seconds"] == pytest.approx(sum(times.wall_shares(plan_sweep(load_spec(out)))))
    assert doc["design"]["flops"] <= 0.6 * doc["reference_grid"]["flops"]
    assert main([*args, "--flop-fraction", "0.6"]) == 2  # --cost wall without probe or timings
    assert "needs its throughput probe or --timings" in capsys.readouterr().err


def test_cli_wall_cap_picks_the_narrowest_design_within_the_wall_time(tmp_path, capsys):
    """--wall-fraction 0.5 with measured timings: the design's est. wall is at most half the reference's and
    no design on the front within that wall time is predicted narrower; a wall cap needs --cost wall."""
    doc_path = tmp_path / "design.json"
    args = ["design", "--preset", "laptop-staggered", "--prior", str(LAPTOP_RESULTS), "--no-probe"]
    timed = [*args, "--cost", "wall", "--timings", str(LAPTOP_RESULTS), "--workers", "2"]
    assert main([*timed, "--wall-fraction", "0.5", "--json", str(doc_path)]) == 0
    assert "of estimated wall time" in capsys.readouterr().out
    doc = json.loads(doc_path.read_text())
    cap = 0.5 * doc["reference_grid"]["est_seconds"]
    assert doc["target"]["wall_cap_seconds"] == pytest.approx(cap)
    assert doc["design"]["est_seconds"] <= cap
    width = doc["design"]["predicted_ci"]["phi"]
    assert all(p["predicted"]["phi"] >= width for p in doc["pareto"] if p["cost"] <= cap)
    assert any(p["cost"] > cap and p["predicted"]["phi"] < width for p in doc["pareto"])  # the cap binds
    assert main([*args, "--wall-fraction", "0.5"]) == 2
    assert main([*timed, "--wall-cap", "3600", "--flop-cap", "1e14"]) == 2  # two targets
    # a cap of 1% of the reference's estimate (from the committed run times, not this machine's speed) is
    # below the smallest design that keeps the constraints
    assert main([*timed, "--wall-fraction", "0.01"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "add --cost wall" in err[0] and "give one target" in err[1]
    assert "no design fits under" in err[2] and "of the search's cost" in err[2]


def test_cli_bad_input_is_one_line(capsys):
    assert main(["design", "--preset", "paper", "--target-ci", "0.01", "--flop-cap", "1e20"]) == 2
    assert main(["design", "--preset", "paper", "--no-probe", "--target-ci", "0.001"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "give one target" in err[0] and "no design" in err[1]


def test_simulate_end_to_end_small(tmp_path, capsys):
    """A tiny --simulate run: three budgets, r ∈ {1, 8}, 2 draws with cheap fits."""
    code = main(
        [
            "design",
            "--preset",
            "paper",
            "--budgets",
            *map(str, BUDGETS[:3]),
            "--rs",
            "1",
            "8",
            "--no-probe",
            "--flop-fraction",
            "0.6",
            "--simulate",
            "2",
            "--sim-restarts",
            "40",
            "--sim-bootstrap",
            "10",
            "--sim-bootstrap-restarts",
            "1",
            "--sim-rounds",
            "1",
            "--json",
            str(tmp_path / "d.json"),
        ]
    )
    assert code == 0
    doc = json.loads((tmp_path / "d.json").read_text())
    real = doc["design"]["realised"]
    assert real["k"] == 2 and len(real["per_seed"]) == 2
    assert 0 < real["ci_width"]["phi"] < 1 and 0 <= real["coverage"] <= 1
    assert doc["reference_grid"]["realised"]["k"] == 2


def test_simulated_compare_detects_a_large_delta_phi(paper):
    prior, _, _ = paper
    cands = d.candidates_from_spec(preset("paper"), budgets=BUDGETS[:3])
    info = d.Information.build(prior, cands)
    out = d.simulate_power(
        cands,
        info,
        prior,
        d.RunDesign(np.arange(len(cands.runs))),
        0.3,
        1,
        restarts=40,
        bootstrap=5,
        bootstrap_restarts=1,
    )
    (row,) = out.per_seed
    assert row.delta_phi == pytest.approx(0.3, abs=0.06) and row.detected and out.power == 1.0


def test_power_falls_with_the_effect_and_rises_with_precision():
    assert d.power(0.1, 0.0357) == pytest.approx(0.80, abs=0.01)
    assert d.power(0.05, 0.0357) < d.power(0.1, 0.0357) < d.power(0.1, 0.02)
    assert d.power(0.1, math.inf) == 0.0


def _partial_sweep(root, finished: int):
    """A sweep folder of the r ∈ {1, 8} lower-three-budget paper grid with ``finished`` runs done (losses from
    the published law + 0.01 nats of noise)."""
    spec = preset("paper")
    group = spec.groups[0]
    group.rs = [1, 8]
    group.grid = [c for c in group.grid if c.budget <= BUDGETS[2]]
    root.mkdir(parents=True)
    (root / SPEC_FILE).write_text(dump_yaml(spec))
    rng = np.random.default_rng(0)
    runs = plan_sweep(spec)
    for run in runs[:finished]:
        loss = float(
            d.Prior.from_coefficients(JOINT_FIT, 0.01, "").loss(run.n_once, run.n_rec, run.r, run.tokens)
        )
        folder = run_dir(root, run.name)
        folder.mkdir(parents=True)
        result = {
            "status": "ok",
            "val_loss": loss + 0.01 * rng.standard_normal(),
            "n": run.n,
            "n_once": run.n_once,
            "n_rec": run.n_rec,
            "tokens": run.tokens,
        }
        (folder / RESULT_FILE).write_text(json.dumps(result))
    return spec, runs


def test_sequential_mode_appends_runs_without_renaming_any(tmp_path, capsys):
    root = tmp_path / "sweep"
    spec, runs = _partial_sweep(root, finished=20)
    ext = tmp_path / "ext.yaml"
    code = main(
        [
            "design",
            "--from",
            str(root),
            "--preset",
            "paper",
            "--budgets",
            *map(str, BUDGETS[:3]),
            "--no-probe",
            "--flop-cap",
            "2e19",
            "--out",
            str(ext),
            "--apply",
        ]
    )
    assert code == 0, capsys.readouterr().err
    extended = load_spec(ext)
    assert [g.name for g in extended.groups][: len(spec.groups)] == [g.name for g in spec.groups]
    assert all(g.name.startswith("ext1") for g in extended.groups[len(spec.groups) :])
    new_runs = plan_sweep(extended)
    old = {r.name: r for r in runs}
    assert {r.name for r in new_runs} > set(old)
    added = [r for r in new_runs if r.name not in old]
    assert 0 < sum(r.total_flops for r in added) <= 2e19
    assert not {(r.budget, r.width, r.r) for r in added} & {(r.budget, r.width, r.r) for r in runs}
    # --apply: the folder now holds the extended spec and reopens with every old run under its old name
    reopened, planned = open_sweep(root)
    assert dump_yaml(reopened) == ext.read_text()
    assert {r.name for r in planned} >= set(old)


def test_a_second_extension_from_the_sweeps_own_widths_is_ext2(tmp_path, capsys):
    root = tmp_path / "sweep"
    _partial_sweep(root, finished=20)
    args = ["design", "--from", str(root), "--no-probe"]
    assert main([*args, "--flop-cap", "5e18", "--out", str(tmp_path / "ext1.yaml"), "--apply"]) == 0
    assert main([*args, "--flop-cap", "5e19", "--out", str(tmp_path / "ext2.yaml")]) == 0, (
        capsys.readouterr().err
    )
    names = [g.name for g in load_spec(tmp_path / "ext2.yaml").groups]
    assert (
        names[0] == "main"
        and any(n.startswith("ext1") for n in names)
        and any(n.startswith("ext2") for n in names)
    )
    assert main(["design", "--from", str(root), "--no-probe"]) == 2
    assert "needs a target" in capsys.readouterr().err


# ------------------------------------------------------------------ search cost, bracketing, simulated power


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 200),
    data=st.data(),
    slack=st.floats(0.2, 3.0),
)
def test_bracket_search_finds_the_first_passing_index(n, data, slack):
    """A monotone predicate, a seed anywhere and a biased guess (``aim`` off by a factor): with enough
    evaluations the search returns exactly the first passing index (None if nothing passes), never evaluates
    an index twice, and never returns a failing one."""
    threshold = data.draw(st.integers(0, n))  # n: nothing passes
    seed = data.draw(st.integers(0, n - 1))
    calls = []

    def passes(i):
        calls.append(i)
        return i >= threshold

    def aim(i):
        return int(threshold * slack)

    budget = 3 * math.ceil(math.log2(n + 1)) + 3
    found, evaluated = d.bracket_search(n, seed, passes, aim, budget)
    assert evaluated == calls and len(set(calls)) == len(calls) <= budget and calls[0] == seed
    assert found == (threshold if threshold < n else None)
    # a tight budget: whatever is returned passes, and the budget holds
    calls.clear()
    found, evaluated = d.bracket_search(n, seed, passes, aim, 2)
    assert len(evaluated) <= 2 and (found is None or found >= threshold)


def test_bracket_search_bisects_in_position_and_expands_at_most_twofold():
    """With positions (costs), a far-off aim moves the bracket at most 2x in cost, and bisection halves the
    bracket in cost, not in index: on a front crowded at the cheap end the probe lands mid-cost."""
    cost = np.concatenate([np.linspace(1, 2, 90), np.linspace(3, 10, 10)])
    _, evaluated = d.bracket_search(100, 0, lambda i: cost[i] >= 3.5, lambda i: 99, 4, position=cost)
    assert cost[evaluated[1]] <= 2 * cost[0] < cost[evaluated[2]] <= 4 * cost[0]  # 1 → ≤ 2 → ≤ 4
    assert cost[evaluated[2]] >= 3.5  # the second expansion brackets the answer
    assert abs(cost[evaluated[3]] - 0.5 * (cost[evaluated[1]] + cost[evaluated[2]])) <= 0.5
    # downwards too: a far-off aim below a hit goes no lower than half its cost
    _, down = d.bracket_search(100, 99, lambda i: cost[i] >= 3.5, lambda i: 0, 2, position=cost)
    assert cost[down[1]] >= cost[99] / 2


@pytest.fixture(scope="module")
def small():
    """Three budgets, r ∈ {1, 8}: the search is fast."""
    prior = d.load_prior("paper")
    cands = d.candidates_from_spec(preset("paper"), budgets=BUDGETS[:3], rs=[1, 8])
    return prior, cands, d.Information.build(prior, cands)


def test_the_search_minimises_the_cost_it_is_given(small):
    """A cost proportional to FLOPs gives the FLOP path; a cost that makes the middle budget 50x dearer per
    FLOP makes the wall path reach the FLOP path's final precision without paying for that budget first."""
    _, cands, info = small
    flop_path = d.greedy_path(cands, info)
    scaled = d.greedy_path(cands.with_cost(3 * cands.flops), info)
    assert [p.design.idx.tolist() for p in scaled] == [p.design.idx.tolist() for p in flop_path]
    assert [p.cost for p in scaled] == pytest.approx([3 * p.flops for p in flop_path])
    middle = cands.budget == BUDGETS[1]
    dear = cands.with_cost(np.where(middle, 50.0, 1.0) * cands.flops)
    path = d.greedy_path(dear, info)
    for p in path:
        assert p.cost == pytest.approx(float(dear.run_cost[p.design.idx].sum()))
    first_middle = [middle[p.design.idx].any() for p in path].index(True)
    flop_first_middle = [middle[p.design.idx].any() for p in flop_path].index(True)
    assert first_middle > flop_first_middle
    front = d.pareto(path)
    assert [p.cost for p in front] == sorted(p.cost for p in front)
    assert all(a.predicted["phi"] > b.predicted["phi"] for a, b in zip(front, front[1:]))


def _fake_realisation(optimism):
    """A ``simulate`` stand-in: realised width = predicted × optimism(design)."""

    def fake(cands, info, prior, design, k, **settings):
        width = info.ci_widths(design.weights(len(cands.runs)))["phi"] * optimism(design)
        return d.Realisation(k=k, ci_width={"phi": width}, coverage=1.0, phi_median=0.0, phi_at_bound=0.0)

    return fake


def test_simulated_ci_search_finds_the_cheapest_design_that_realises_the_target(small, monkeypatch):
    """Realised = predicted × (1 + 1/cells): sparse designs are optimistic, as measured. The search returns
    the cheapest front design whose realised width reaches the target (the brute-force answer), simulating
    at most ``rounds`` designs, each once, and logs every one of them."""
    prior, cands, info = small

    def optimism(design):
        return 1 + 1.5 / len({(b, r) for b, r in zip(cands.budget[design.idx], cands.r[design.idx])})

    monkeypatch.setattr(simulation, "simulate", _fake_realisation(optimism))
    paths = [search(cands, info) for search in (d.greedy_path, d.pruning_path)]
    front = d.pareto([p for path in paths for p in path])
    realised = [p.predicted["phi"] * optimism(p.design) for p in front]
    target = float(np.quantile(realised, 0.4))
    truth = next(p for p, w in zip(front, realised) if w <= target)
    assert truth is not d.choose(front, target, None)  # the asymptotic pick is not the answer
    chosen, real, log = d.simulate_in_loop(cands, info, prior, paths, 1, target_ci=target, rounds=12)
    assert chosen is truth and real.ci_width["phi"] <= target
    labels = [row.design for row in log]
    assert len(labels) == len(set(labels)) <= 12
    assert all(row.reaches_target == (row.realised.ci_width["phi"] <= target) for row in log)
    chosen6, _, log6 = d.simulate_in_loop(cands, info, prior, paths, 1, target_ci=target, rounds=3)
    assert len(log6) <= 3
    passing = [row for row in log6 if row.reaches_target]
    if passing:  # the cheapest simulated design that realises the target
        assert chosen6.design.label == min(passing, key=lambda row: row.cost).design


def test_simulated_cost_cap_simulates_only_designs_within_the_cap(small, monkeypatch):
    """A cap on the search's own cost (wall seconds here: the middle budget 5x dearer per FLOP) simulates
    each path's narrowest design within it and keeps the narrowest realised; FLOPs may exceed the same
    figure, only the cost counts."""
    prior, cands, info = small
    dear = cands.with_cost(np.where(cands.budget == BUDGETS[1], 5.0, 1.0) * cands.flops)
    monkeypatch.setattr(simulation, "simulate", _fake_realisation(lambda design: 1.0))
    paths = [search(dear, info) for search in (d.greedy_path, d.pruning_path)]
    costs = sorted(p.cost for path in paths for p in path)
    cap = costs[len(costs) // 2]
    chosen, _, log = d.simulate_in_loop(dear, info, prior, paths, 1, cost_cap=cap, rounds=6)
    assert chosen.cost <= cap and all(row.cost <= cap for row in log) and len(log) <= 2
    within = [p for path in paths for p in path if p.cost <= cap]
    assert chosen.predicted["phi"] == min(p.predicted["phi"] for p in within)


def test_simulated_ci_search_is_not_shadowed_by_replicated_designs(small, monkeypatch):
    """Replicates halve the predicted variance but the cell bootstrap resamples the same cells. With a
    stand-in whose realised width ignores replicates (as measured on the laptop preset) and a target at
    which a front mixing replicate counts hides the cheapest answer behind a replicated design's optimistic
    prediction, the search still returns the cheapest design of any replicate count that realises it."""
    prior, cands, info = small

    def cells(design):
        return len({(b, r) for b, r in zip(cands.budget[design.idx], cands.r[design.idx])})

    def realised_width(design):
        return _predicted(info, design) * design.replicates**0.5 * (1 + 1.5 / cells(design))

    def cheapest(points, target):
        return min((p for p in points if realised_width(p.design) <= target), key=lambda p: p.cost)

    fake = _fake_realisation(lambda x: realised_width(x) / _predicted(info, x))
    monkeypatch.setattr(simulation, "simulate", fake)
    paths = [search(cands, info, replicates=k) for k in (1, 2) for search in (d.greedy_path, d.pruning_path)]
    ones, twos = (d.pareto([p for path in paths for p in path if p.design.replicates == k]) for k in (1, 2))
    mixed = d.pareto([p for path in paths for p in path])
    shadowed = [
        target
        for target in sorted({realised_width(p.design) for p in ones})
        if cheapest(mixed, target).cost > cheapest(ones + twos, target).cost
    ]
    assert shadowed  # such a target exists on this grid
    truth = cheapest(ones + twos, shadowed[0])
    chosen, real, log = d.simulate_in_loop(cands, info, prior, paths, 1, target_ci=shadowed[0], rounds=12)
    assert chosen is truth and real.ci_width["phi"] <= shadowed[0]
    assert len({row.design for row in log}) == len(log)


def _predicted(info, design):
    return info.ci_widths(design.weights(len(info.loss)))["phi"]


def test_simulated_power_search_returns_the_cheapest_design_that_reaches_the_power(small, monkeypatch):
    """With a stand-in for ``simulate_power`` (power of an SE 1.6x the asymptotic one) the search returns the
    brute-force answer on the cost-vs-SE(Δφ) front; the asymptotic power only seeds it."""
    prior, cands, info = small
    shared = (cands.r == 1).astype(float)

    def se(design):
        return d.delta_phi_se(info, design.weights(len(cands.runs)), shared)

    def fake(cands_, info_, prior_, design, delta, k, **settings):
        return PowerSimulation(
            k=k, delta_phi=delta, power=d.power(delta, 1.6 * se(design)), median_ci_width=0.0
        )

    monkeypatch.setattr(delta_phi, "simulate_power", fake)
    points = [p for search in (d.greedy_path, d.pruning_path) for p in search(cands, info)]
    front = d.pareto(points, score=lambda p: se(p.design))
    delta = 2.8 * 1.6 * float(np.median([se(p.design) for p in front]))  # the answer mid-front
    truth = next((p for p in front if d.power(delta, 1.6 * se(p.design)) >= 0.8), None)
    assert truth is not None and truth is not d.cheapest_with_power(cands, info, front, delta)
    found, sim, log = d.simulate_power_in_loop(cands, info, prior, points, delta, 4, rounds=12)
    assert found is truth and sim.power >= 0.8
    assert len({row.design for row in log}) == len(log) <= 12
    assert all(row.predicted_power == pytest.approx(d.power(delta, row.se_delta_phi)) for row in log)


def test_simulated_power_search_end_to_end_tiny(small):
    """The real ``compare`` simulation on a tiny case (one pair per design, few resamples): a large Δφ is
    detected by a design that is cheaper than the largest, and every simulated design is logged."""
    prior, cands, info = small
    points = [p for search in (d.greedy_path, d.pruning_path) for p in search(cands, info)]
    kw = {"restarts": 10, "bootstrap": 5, "bootstrap_restarts": 1}
    found, sim, log = d.simulate_power_in_loop(cands, info, prior, points, 0.4, 1, target=0.5, rounds=2, **kw)
    assert 1 <= len(log) <= 2
    assert all(row.simulated.power in (0.0, 1.0) for row in log)  # one pair: detected or not
    if found is not None:
        assert sim.power >= 0.5 and found.flops < max(p.flops for p in points)
        assert (
            found.design.label
            == min((row for row in log if row.reaches_target), key=lambda row: row.cost).design
        )


def test_cli_wall_cost_uses_the_planners_estimate(tmp_path, capsys, monkeypatch):
    """--cost wall: the search minimises each run's share of the planner's wall-time estimate
    (``ThroughputProbe.wall_shares``); the design's est. wall time is what `loopscale plan` would print for
    its spec. The probe is a fixed stand-in (small widths slow per FLOP, a start cost per run)."""
    from loopscale.sweep import plan as plan_mod

    probe = plan_mod.ThroughputProbe(
        flops_per_s={256: 2e11, 1024: 2e12, 3072: 4e12}, device="cpu", threads=1, workers=2, start_seconds=30
    )
    monkeypatch.setattr(plan_mod, "measure_throughput", lambda spec, runs, workers=1: probe)
    base = ["design", "--preset", "paper", "--budgets", *map(str, BUDGETS[:3]), "--rs", "1", "8"]
    docs = {}
    for cost in ("wall", "flops"):
        out, doc_path = tmp_path / f"{cost}.yaml", tmp_path / f"{cost}.json"
        args = [*base, "--workers", "2", "--cost", cost, "--target-ci", "0.2", "--out", str(out)]
        assert main([*args, "--json", str(doc_path)]) == 0, capsys.readouterr().err
        docs[cost] = doc = json.loads(doc_path.read_text())
        assert doc["cost"] == cost
        assert doc["design"]["est_seconds"] == pytest.approx(probe.sweep_seconds(plan_sweep(load_spec(out))))
        assert doc["design"]["predicted_ci"]["phi"] <= 0.2
    assert docs["wall"]["design"]["est_seconds"] <= docs["flops"]["design"]["est_seconds"]
    costs = [p["cost"] for p in docs["wall"]["pareto"]]
    assert costs == sorted(costs)
    assert main([*base, "--cost", "wall", "--no-probe"]) == 2
    assert "needs its throughput probe" in capsys.readouterr().err


def test_cli_simulated_searches_report_every_candidate(tmp_path, capsys):
    """--target-ci with --simulate and --simulate-power: every simulated design is in the printed tables and
    the JSON, at most --sim-rounds of each (tiny settings: one draw per design, few resamples)."""
    code = main(
        [
            *["design", "--preset", "paper", "--budgets", *map(str, BUDGETS[:3]), "--rs", "1", "8"],
            *["--no-probe", "--target-ci", "0.25", "--simulate", "1", "--sim-rounds", "2"],
            *["--sim-restarts", "10", "--sim-bootstrap", "5", "--sim-bootstrap-restarts", "1"],
            *["--no-reference-sim", "--simulate-power", "1", "--delta-phi", "0.4", "--target-power", "0.5"],
            *["--json", str(tmp_path / "d.json")],
        ]
    )
    assert code == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    doc = json.loads((tmp_path / "d.json").read_text())
    rounds, power = doc["simulation_rounds"], doc["power"]["simulated"]
    assert 1 <= len(rounds) <= 2 and 1 <= len(power["candidates"]) <= 2
    for row in rounds + power["candidates"]:
        assert row["design"] in text
    assert "simulated designs" in text and "searching for power >= 0.5" in text
    passing = [row for row in rounds if row["reaches_target"]]
    if passing:
        assert doc["design"]["label"] == min(passing, key=lambda row: row["cost"])["design"]


def test_cli_default_target_is_the_references_realised_width(tmp_path, capsys):
    """With --simulate and no target, the design must realise the reference's own width on the same seeds."""
    code = main(
        [
            *["design", "--preset", "paper", "--budgets", *map(str, BUDGETS[:3]), "--rs", "1", "8"],
            *["--no-probe", "--simulate", "1", "--sim-rounds", "1", "--sim-restarts", "10"],
            *["--sim-bootstrap", "5", "--sim-bootstrap-restarts", "1", "--json", str(tmp_path / "d.json")],
        ]
    )
    assert code == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["target"]["ci_phi"] == doc["reference_grid"]["realised"]["ci_width"]["phi"]
    assert doc["target"]["source"] == "the reference's realised width"
    assert "the reference's realised width" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["nan", "inf", "0"])
def test_cli_refuses_a_non_finite_or_non_positive_budget_in_one_line(capsys, bad):
    argv = ["design", "--preset", "paper", "--budgets", "1e18", bad, "--widths", "512", "768", "1024"]
    assert main([*argv, "--no-probe"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--budgets" in err and bad in err


def test_sequential_mode_leaves_out_a_run_with_a_damaged_result(tmp_path, capsys):
    """A non-numeric field in one finished run's result.json: --from refits the other 19 (the damaged run
    counts as failed)."""
    root = tmp_path / "sweep"
    _, runs = _partial_sweep(root, finished=20)
    damaged = run_dir(root, runs[3].name) / RESULT_FILE
    damaged.write_text(json.dumps({**json.loads(damaged.read_text()), "n_rec": "lots"}))
    out = tmp_path / "d.json"
    argv = ["design", "--from", str(root), "--preset", "paper", "--budgets", *map(str, BUDGETS[:3])]
    assert main([*argv, "--no-probe", "--flop-cap", "2e19", "--json", str(out)]) == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert "the 19 finished runs" in doc["prior"]["source"]


def test_make_design_shows_a_progress_bar_per_simulated_design(monkeypatch):
    """``make_design`` opens one progress bar per simulated design (total = the draws) and advances it once
    per fitted table."""
    import contextlib

    bars = []

    @contextlib.contextmanager
    def record(total, desc, unit="it", **_):
        bars.append([desc, total, 0])

        def advance(n=1):
            bars[-1][2] += n

        yield advance

    monkeypatch.setattr(simulation, "progress_bar", record)
    settings = d.DesignSettings(
        budgets=BUDGETS[:3],
        rs=[1, 8],
        flop_fraction=0.6,
        simulate=2,
        sim_restarts=10,
        sim_bootstrap=5,
        sim_bootstrap_restarts=1,
        sim_rounds=1,
        reference_sim=False,
    )
    doc = d.make_design(settings, preset("paper"), "paper")
    assert [(total, done) for _, total, done in bars] == [(2, 2)]
    assert bars[0][0] == f"simulate {doc.design.label}"
    assert doc.design.realised.k == 2


def test_a_realisation_outside_the_prediction_is_a_code_written_as_a_sentence():
    """design.json holds the side on which the realised φ CI width misses the prediction, not a sentence."""
    assert simulation.agreement(0.2, 0.24) is None and simulation.agreement(0.2, 0.14) == "narrower"
    realised = Realisation(
        k=2, ci_width={"phi": 0.3}, coverage=1.0, phi_median=0.5, phi_at_bound=0.0, per_seed=(), settings={}
    )
    row = DesignRow(
        label="x", runs=4, replicates=1, flops=1e15, est_seconds=None, predicted_ci={"phi": 0.2}, cells=(),
        realised=realised, agreement=simulation.agreement(0.2, 0.3),
    )  # fmt: skip
    assert row.to_dict()["agreement"] == "wider"
    assert agreement_text(row) == (
        "the realised phi CI is 1.50x the asymptotic prediction (wider than ±25%): the Fisher information is "
        "not a reliable guide for this design (few cells, bound hits or a non-Gaussian fit); trust the "
        "simulation"
    )
