"""Variable-projection start points (``fit.varpro``): exact linear coefficients on the exponent grid.

Noise-free losses from a law whose exponents sit on the grid: the best grid point is those exponents and
its (E, A, B) are the law's, with or without a held coefficient. Runs in well under a second.
"""

from __future__ import annotations

import numpy as np

from loopscale.fit import load_table
from loopscale.fit.fitter import Box, design_for
from loopscale.fit.law import PARAMS, law_loss
from loopscale.fit.varpro import EXPONENT_GRID, seed_starts
from loopscale.paper import MAIN_GRID, grid_runs

ALPHA, BETA, PHI = (PARAMS.index(k) for k in ("alpha", "beta", "phi"))


def _on_grid_table():
    coef = {
        "E": 1.6,
        "A": 400.0,
        "B": 900.0,
        "alpha": float(EXPONENT_GRID[ALPHA][3]),
        "beta": float(EXPONENT_GRID[BETA][4]),
        "phi": 0.5,
    }
    runs = grid_runs(MAIN_GRID)
    for run in runs:
        run["loss"] = float(law_loss(coef, run["n_once"], run["n_rec"], run["r"], run["tokens"]))
    return load_table(runs), coef


def test_the_best_grid_point_recovers_the_law_exactly():
    table, coef = _on_grid_table()
    design, box = design_for(table, plain=False), Box.for_form(None)
    weights = np.ones((2, len(table)))
    weights[1, :10] = 3.0  # a resample's weights do not move an exact fit
    starts = seed_starts(design, box.free, np.tile(box.fixed_values, (2, 1)), weights, None, 3)
    assert starts.shape == (2, 3, len(PARAMS))
    for best in starts[:, 0]:
        assert np.allclose(best[[ALPHA, BETA, PHI]], [coef["alpha"], coef["beta"], coef["phi"]])
        assert np.allclose(np.exp(best[:3]), [coef["A"], coef["B"], coef["E"]], rtol=1e-6)


def test_a_held_coefficient_keeps_its_value():
    table, coef = _on_grid_table()
    design = design_for(table, plain=False)
    box = Box.for_form(None, held={"e": float(np.log(coef["E"]))})
    base = box.fixed_values[None, :]
    best = seed_starts(design, box.free, base, np.ones((1, len(table))), None, 1)[0, 0]
    assert best[2] == np.log(coef["E"])
    assert np.allclose(np.exp(best[:2]), [coef["A"], coef["B"]], rtol=1e-6)


def test_a_fully_held_grid_still_gives_count_starts():
    table, coef = _on_grid_table()
    design = design_for(table, plain=True)
    box = Box.for_form(None, plain=True, held={"alpha": coef["alpha"], "beta": coef["beta"]})
    starts = seed_starts(design, box.free, box.fixed_values[None, :], np.ones((1, len(table))), None, 4)
    assert starts.shape == (1, 4, len(PARAMS))
    assert np.all(starts[0, :, [ALPHA, BETA]].T == [coef["alpha"], coef["beta"]])
