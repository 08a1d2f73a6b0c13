"""``loopscale design --hold``: the precision of φ given parameters held at the prior's values (the design
side of ``fit --fix`` / ``--prior``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loopscale import design as d
from loopscale.cli import main
from loopscale.design.simulation import simulate
from loopscale.fit.law import PARAMS, PHI
from loopscale.paper import MAIN_GRID
from loopscale.sweep import preset

BUDGETS = sorted(MAIN_GRID)
HELD = tuple(PARAMS.index(name) for name in ("e", "alpha", "beta"))


@pytest.fixture(scope="module")
def small():
    prior = d.load_prior("paper")
    cands = d.candidates_from_spec(preset("paper"), budgets=BUDGETS[:3], rs=[1, 8])
    return prior, cands


def test_holding_parameters_is_the_free_block_of_the_sandwich(small):
    """Held rows and columns are 0, the free block equals H_ff⁻¹·V_ff·H_ff⁻¹ computed from the full per-run
    Jacobian independently, and knowing α, β, E can only narrow φ's predicted interval."""
    prior, cands = small
    free_info = d.Information.build(prior, cands)
    held_info = d.Information.build(prior, cands, HELD)
    w = np.ones(len(cands.runs))
    cov = held_info.covariance(w)
    assert np.all(cov[list(HELD)] == 0) and np.all(cov[:, list(HELD)] == 0)
    keep = [i for i in range(len(PARAMS)) if i not in HELD]
    jac = free_info.jac[:, keep]
    h = (jac * free_info.bread[:, None]).T @ jac
    v = (jac * free_info.meat[:, None]).T @ jac
    expected = np.linalg.inv(h) @ v @ np.linalg.inv(h)
    np.testing.assert_allclose(cov[np.ix_(keep, keep)], expected, rtol=1e-10)
    assert held_info.phi_variance(w) < free_info.phi_variance(w)
    widths = held_info.ci_widths(w)
    assert widths["alpha"] == widths["beta"] == widths["E"] == 0.0 and widths["phi"] > 0


def test_a_ladder_needs_the_held_exponents(small):
    """One budget: β is all but unidentified (tokens ∝ 1/N up to the loop's FLOPs), so the free design's
    φ interval is wider than φ's whole range; given α, β, E it is a measurement (as ``fit --prior``)."""
    prior, _ = small
    cands = d.candidates_from_spec(preset("paper"), budgets=BUDGETS[2:3], rs=[1, 8], beta_held=True)
    w = np.ones(len(cands.runs))
    assert d.Information.build(prior, cands).ci_widths(w)["phi"] > 5
    assert d.Information.build(prior, cands, HELD).ci_widths(w)["phi"] < 0.3


def test_simulated_fits_hold_the_prior_values_and_report_no_interval_for_them(small):
    prior, cands = small
    info = d.Information.build(prior, cands, HELD)
    design = d.RunDesign(np.arange(len(cands.runs)), 1, "all")
    real = simulate(cands, info, prior, design, 2, restarts=20, bootstrap=8, bootstrap_restarts=1)
    assert real.ci_width["alpha"] == real.ci_width["beta"] == real.ci_width["E"] == 0.0
    assert 0 < real.ci_width["phi"] < 1
    assert all(abs(row["phi"] - prior.theta[PHI]) < 0.2 for row in real.per_seed)


def test_cli_prints_held_and_stores_it(tmp_path, capsys):
    small_design = ["design", "--preset", "paper", "--budgets", *map(str, BUDGETS[:3]), "--rs", "1", "8"]
    held = ["--hold", "alpha", "beta", "E"]
    out_json = ["--json", str(tmp_path / "d.json")]
    code = main([*small_design, "--no-probe", "--flop-fraction", "0.6", *held, *out_json])
    out = capsys.readouterr().out
    assert code == 0 and "held at the prior's values in every fit" in out and "held" in out.split("\n")[4]
    assert json.loads((tmp_path / "d.json").read_text())["held"] == ["E", "alpha", "beta"]


@pytest.mark.parametrize(
    "extra, words",
    [(["--hold", "phi"], "cannot hold 'phi'"), (["--hold", "E", "--simulate-power", "2"], "drop --hold")],
)
def test_cli_bad_hold_is_one_line(extra, words, capsys):
    assert main(["design", "--preset", "paper", "--no-probe", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
