"""The fitter on real data (Chinchilla), on the paper's simulated grid, against a plain SciPy loop."""

from __future__ import annotations

import numpy as np
import pytest

from loopscale.errors import UserError
from loopscale.fit import fit_law, load_table
from loopscale.fit.fitter import Box, design_for, fit_many, polish
from loopscale.paper import JOINT_FIT

from .conftest import simulated_grid


def test_chinchilla_real_data_reaches_the_published_optimum(chinchilla_table):
    """Must show 1: Epoch's extraction of Hoffmann et al. Figure 4, nobody on this project produced it."""
    fit = fit_law(chinchilla_table, form="chinchilla", restarts=500, seed=0)
    assert fit.objective <= 1.01828e-3
    for name, expected in {"a": 6.169, "b": 7.670, "e": 0.5973, "alpha": 0.3473, "beta": 0.3672}.items():
        got = fit.coefficients[name]
        assert got == pytest.approx(expected, rel=5e-3), name
    assert fit.grad_norm < 1e-7
    assert fit.phi is None and "phi" not in fit.to_dict()


def test_noise_free_grid_recovers_the_published_law(grid_table):
    """Must show 2 / V9: φ within 0.005 (V9 asks 0.001), every parameter within 1%, objective < 1e-8."""
    fit = fit_law(grid_table, restarts=100, seed=1)  # 100 starts: V9 finds ~1 in 3 reaching the optimum
    assert fit.phi == pytest.approx(JOINT_FIT["phi"], abs=1e-3)
    for name in ("E", "A", "B", "alpha", "beta"):
        assert getattr(fit, name) == pytest.approx(JOINT_FIT[name], rel=1e-2), name
    assert fit.alpha == pytest.approx(JOINT_FIT["alpha"], abs=1e-3)
    assert fit.beta == pytest.approx(JOINT_FIT["beta"], abs=1e-3)
    assert fit.objective < 1e-8
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert fit.starts_at_optimum >= 1


def test_restricted_forms_fit_worse_than_the_free_joint_fit():
    table = load_table(simulated_grid(noise=0.01, seed=11))
    free = fit_law(table, restarts=60, seed=0)
    r2 = {phi: fit_law(table, fix_phi=phi, restarts=60, seed=0).r2 for phi in (0.0, 1.0)}
    # Paper Table 2: 0.9972 vs 0.9858 (φ = 0) and 0.9552 (φ = 1).
    assert free.r2 > 0.99
    assert r2[0.0] < free.r2 - 0.005
    assert r2[1.0] < r2[0.0] - 0.01


@pytest.mark.parametrize("noise_seed", [2, 3])
def test_batched_optimum_equals_the_scipy_loop_from_the_same_starts(noise_seed):
    """Cheap subset of the benchmark's proof: 20 shared start points, same best objective to 1e-10.

    The two methods descend along different paths, so a single start may end in different basins; with
    20 starts (about 1 in 4 reaches the global optimum) both find it. With too few starts the plain loop
    can miss it while the batched fitter does not (seen with 12 starts at seed 3).
    """
    table = load_table(simulated_grid(noise=0.01, seed=noise_seed))
    design = design_for(table, plain=False)
    box = Box.for_form(None)
    starts = box.starts(np.random.default_rng(noise_seed), 20)
    ours = fit_many(design, box, None, 0, np.random.default_rng(0), extra_starts=starts)[0]
    # The reference: one SciPy L-BFGS-B run (ftol 1e-15, gtol 1e-12) from each start, best kept.
    reference = min(polish(design, x0, box.free)[1] for x0 in starts)
    assert ours.objective == pytest.approx(reference, abs=1e-10)


def test_bad_fits_are_refused_with_one_line():
    rows = simulated_grid()
    with pytest.raises(UserError, match="only 5 usable run"):
        fit_law(load_table(rows[:5]))
    only_r1 = load_table([r for r in rows if r["r"] == 1])
    with pytest.raises(UserError, match="phi is unidentifiable"):
        fit_law(only_r1)
    one_budget = load_table([r for r in rows if r["budget"] == 4.64e18])
    with pytest.raises(UserError, match="beta is unidentifiable"):
        fit_law(one_budget)
    with pytest.raises(UserError, match="one architecture"):
        fit_law(load_table(rows), form="chinchilla")
    no_budget = [{k: v for k, v in r.items() if k != "budget"} for r in rows if r["r"] == 1]
    params_only = {
        "params": [r["n"] for r in no_budget],
        "tokens": [3e9 * 1e8 / r["n"] for r in no_budget],
        "loss": [r["loss"] for r in no_budget],
    }
    with pytest.raises(UserError, match="beta is unidentifiable"):
        fit_law(load_table(params_only), form="chinchilla")
    with pytest.raises(UserError, match="no phi to fix"):
        fit_law(only_r1, form="chinchilla", fix_phi=0.5)
    with pytest.raises(UserError, match="fixed phi"):
        fit_law(load_table(rows), fix_phi=4.0)
