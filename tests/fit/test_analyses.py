"""Derived numbers from the published coefficients (spec V6–V8, V10, §9.5–9.6) and the analyses' maths."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loopscale.fit import compute_optimal, equivalence, load_table, loop_worth, parabola_minima
from loopscale.fit.analyses import SizeModel, cell_gaps, n_eff, paper_template, residual_stats
from loopscale.fit.protocol_results import CellMinimum
from loopscale.paper import JOINT_FIT, MAIN_GRID
from loopscale.present.fit_text import minimum_miss_text

PHI = JOINT_FIT["phi"]


def test_worth_of_a_loop_v6():
    expected = {2: 1.3746, 4: 1.8895, 8: 2.5973, 16: 3.5702}
    for r, worth in expected.items():
        assert loop_worth(r, PHI).worth == pytest.approx(worth, abs=5e-5)
    assert loop_worth(4, PHI).fraction == pytest.approx(0.472, abs=5e-4)
    assert loop_worth(8, PHI).fraction == pytest.approx(0.325, abs=5e-4)
    assert loop_worth(4, 0.46).worth == pytest.approx(1.8921, abs=5e-5)
    assert loop_worth(8, 0.46).worth == pytest.approx(2.6027, abs=5e-5)


def test_410m_580m_1b_example_v7():
    out = equivalence(1e9, 4, PHI)
    assert out.unique_ratio == pytest.approx(98 / 240, abs=2e-4)  # 0.4083 → ≈ 410M
    assert round(out.unique_params / 1e7) * 10 == 410
    assert out.effective_ratio_layers_only == pytest.approx(0.5779, abs=5e-5)  # ≈ 580M
    assert round(out.effective_ratio_layers_only * 100) * 10 == 580
    assert out.effective_ratio == pytest.approx(0.5936, abs=2e-4)  # injection counted in N_rec
    assert out.block_flops_overhead == pytest.approx(4 / 120, abs=1e-4)
    assert 1.0 < out.flops_ratio < 1.03  # same per-token cost as the 1B model up to the injection
    assert out.cost_equivalent_params == pytest.approx(1e9 * out.flops_ratio, rel=0.01)


@pytest.mark.parametrize("split,expected", [("paper", (0.761, 0.594, 0.481)), ("ls", (0.753, 0.584, 0.467))])
def test_figure1_effective_ratios_v8(split, expected):
    """Effective size relative to the r = 1 model's effective size under the same split, at any width."""
    for d in (384, 1024, 2176):
        plain = SizeModel.build(paper_template(), 1, split)
        base = plain("n_once", d) + plain("n_rec", d)  # = N for the paper split
        for r, ratio in zip((2, 4, 8), expected):
            sizes = SizeModel.build(paper_template(), r, split)
            unique = sizes("n", d) / plain("n", d)
            assert unique == pytest.approx({2: 0.608, 4: 0.408, 8: 0.308}[r], abs=6e-4)
            assert n_eff(sizes("n_once", d), sizes("n_rec", d), r, PHI) / base == pytest.approx(
                ratio, abs=6e-4
            )


def test_size_model_matches_the_spec_reference_table():
    sizes = SizeModel.build(paper_template(), 4)
    assert sizes("n", 640) == pytest.approx(40_152_960, abs=1e-3)
    assert sizes("flops", 640) == pytest.approx(1_047_336_960, abs=1e-2)
    assert sizes.width_for("n", 40_152_960) == pytest.approx(640, abs=1e-9)


# Spec §9.6 "joint-law optimum over continuous s": C → r → (L*, N* in M, D* in B).
TABLE_9_6 = {
    4.64e17: {1: (2.870, 71, 0.58), 2: (2.914, 47, 0.54), 4: (2.956, 34, 0.50), 8: (2.995, 27, 0.47)},
    1.00e18: {1: (2.728, 117, 0.85), 2: (2.768, 78, 0.78), 4: (2.806, 56, 0.73), 8: (2.841, 45, 0.68)},
    2.15e18: {1: (2.604, 192, 1.22), 2: (2.641, 127, 1.12), 4: (2.675, 92, 1.04), 8: (2.707, 73, 0.98)},
    4.64e18: {1: (2.495, 315, 1.74), 2: (2.528, 208, 1.60), 4: (2.560, 151, 1.48), 8: (2.589, 120, 1.38)},
    1.00e19: {1: (2.400, 515, 2.44), 2: (2.430, 341, 2.24), 4: (2.458, 247, 2.07), 8: (2.485, 196, 1.93)},
    2.15e19: {1: (2.316, 842, 3.40), 2: (2.343, 557, 3.11), 4: (2.369, 403, 2.87), 8: (2.393, 320, 2.66)},
}


def test_compute_optimal_frontier_v10_and_table_9_6():
    out = compute_optimal(JOINT_FIT, MAIN_GRID, (1, 2, 4, 8))
    for r, entry in out.per_r.items():
        for row in entry.rows:
            loss, n_m, d_b = TABLE_9_6[row.budget][int(r)]
            assert row.loss == pytest.approx(loss, abs=6e-4)
            assert row.n / 1e6 == pytest.approx(n_m, abs=1.0)  # printed to the nearest million
            assert row.tokens / 1e9 == pytest.approx(d_b, abs=6e-3)
            assert not row.at_edge
        assert entry.a_N == pytest.approx(0.64, abs=0.006)
        assert 0.445 <= entry.a_D <= 0.465
    top = out.per_r["1"].rows[-1]
    assert (round(top.loss, 3), round(top.n / 1e6, -1), round(top.tokens / 1e9, 2)) == (
        2.316,
        840,
        3.40,
    )
    gaps = out.per_r["8"].gap_to_r1
    assert gaps[0] == pytest.approx(2.995 - 2.870, abs=1e-3)
    ls = compute_optimal(JOINT_FIT, [4.64e17], (8,), split="ls")
    assert round(ls.per_r["8"].rows[0].loss, 3) == 3.000


def test_parabola_vertex_is_exact_on_quadratic_cells():
    """Vertices at log N = 20 and 21.75, inside the sizes run (log N from 18.4 to 21.8): bracketed."""
    rows = []
    for budget, (c0, c1, c2) in {1e18: (2.9, -0.2, 0.05), 2e18: (2.7, -0.3, 0.04)}.items():
        for r in (1, 4):
            for n in (1e8, 3e8, 1e9, 3e9):
                x = math.log(n)
                loss = c0 + c1 * (x - 18) + c2 * (x - 18) ** 2 + (0.05 if r == 4 else 0.0)
                rows.append(
                    {"r": r, "n_once": n / 2, "n_rec": n / 2, "tokens": 1e9, "loss": loss, "budget": budget}
                )
    minima = parabola_minima(load_table(rows))
    assert len(minima) == 4
    for m in minima:
        assert m.bracketed and m.reason is None
        # the 2e18 vertex (21.75) lies next to the widest run (21.82): its runs do not bracket it
        assert m.runs_bracket is (m.budget == 1e18)
        c0, c1, c2 = {1e18: (2.9, -0.2, 0.05), 2e18: (2.7, -0.3, 0.04)}[m.budget]
        assert math.log(m.n_star) == pytest.approx(18 - c1 / (2 * c2), abs=1e-9)
        assert m.loss_star == pytest.approx(c0 - c1**2 / (4 * c2) + (0.05 if m.r == 4 else 0), abs=1e-12)
    assert all(g.gap == pytest.approx(0.05, abs=1e-12) for g in cell_gaps(minima))


def _cell(c, r, sizes, loss_of_x):
    return [
        {"r": r, "n_once": n / 2, "n_rec": n / 2, "tokens": 1e9, "loss": loss_of_x(math.log(n)), "budget": c}
        for n in sizes
    ]


def test_parabola_vertex_outside_the_widths_run_is_not_a_number():
    """The demo's failure: a vertex far outside the sizes run (here log N = 30, runs at 16.1–19.5) printed
    as N* and L* (absurd: L* = −296). Not bracketed → no number, a reason instead; the same for a parabola
    that opens downward and for a cell with two sizes. Such cells drop out of the gaps."""
    sizes = (1e7, 3e7, 1e8, 3e8)
    rows = (
        _cell(1e18, 1, sizes, lambda x: 3.0 + 0.01 * (x - 18) ** 2)  # vertex at 18: bracketed
        + _cell(1e18, 4, sizes, lambda x: 3.0 - 1.2 * (x - 18) + 0.05 * (x - 18) ** 2)  # vertex at 30
        + _cell(2e18, 1, sizes, lambda x: 3.0 + 0.5 * (x - 18) + 0.05 * (x - 18) ** 2)  # vertex at 13
        + _cell(2e18, 4, sizes, lambda x: 3.0 - 0.05 * (x - 18) ** 2)  # opens downward
        + _cell(3e18, 1, sizes[:2], lambda x: 3.0 + 0.01 * x)  # two sizes only
    )
    minima = {(m.budget, m.r): m for m in parabola_minima(load_table(rows))}
    assert minima[(1e18, 1)].bracketed and minima[(1e18, 1)].n_star == pytest.approx(math.exp(18))
    expected = {
        (1e18, 4): ("above_widths", "above the widest"),
        (2e18, 1): ("below_widths", "below the narrowest"),
        (2e18, 4): ("opens_downward", "opens downward"),
        (3e18, 1): ("few_widths", "fewer than 3 widths"),
    }
    for key, (code, words) in expected.items():
        m = minima[key]
        assert m.bracketed is False and m.n_star is None and m.loss_star is None, key
        assert m.reason == code and words in minimum_miss_text(code), (key, m.reason)
    assert cell_gaps(tuple(minima.values())) == ()


# Spec §9.5: per-cell empirical minima L* (project page) and the derived gaps (V11).
TABLE_9_5 = {
    4.64e17: (2.85229, 2.91370, 2.93572, 2.97679, (0.061, 0.083, 0.124)),
    1.00e18: (2.71843, 2.77380, 2.79633, 2.83809, (0.055, 0.078, 0.120)),
    2.15e18: (2.60477, 2.64516, 2.67062, 2.70892, (0.040, 0.066, 0.104)),
    4.64e18: (2.49763, 2.53369, 2.55909, 2.59768, (0.036, 0.061, 0.100)),
    1.00e19: (2.40137, 2.43121, 2.45823, 2.49499, (0.030, 0.057, 0.094)),
    2.15e19: (2.30879, 2.33887, 2.35991, 2.40210, (0.030, 0.051, 0.093)),
}


def test_cell_gaps_reproduce_table_9_5():
    minima = [
        CellMinimum(budget=c, r=r, n_runs=4, n_star=1e9, loss_star=v[i], bracketed=True)
        for c, v in TABLE_9_5.items()
        for i, r in enumerate((1, 2, 4, 8))
    ]
    gaps = {(g.budget, g.r): g.gap for g in cell_gaps(minima)}
    for c, v in TABLE_9_5.items():
        for r, expected in zip((2, 4, 8), v[4]):
            assert round(gaps[(c, r)], 3) == pytest.approx(expected, abs=1.01e-3)


def test_residual_stats_by_hand():
    obs, pred, r = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.1, 1.9, 3.0, 4.2]), np.array([1, 1, 2, 2])
    out = residual_stats(obs, pred, r)
    assert out.overall.mean == pytest.approx((-0.1 + 0.1 + 0 - 0.2) / 4)
    assert out.overall.max_abs == pytest.approx(0.2)
    assert out.per_r["2"].rmse == pytest.approx(math.sqrt(0.04 / 2))
    assert out.per_r["1"].n == 2
