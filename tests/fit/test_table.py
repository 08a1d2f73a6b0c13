"""The results-table loader: formats, failed runs, non-looped data, bad input."""

from __future__ import annotations

import csv
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loopscale.errors import UserError
from loopscale.fit import load_table
from loopscale.fit.table import SkippedRunsWarning

from .conftest import simulated_grid


def _write(tmp_path, rows, fmt):
    path = tmp_path / f"runs.{fmt}"
    if fmt == "csv":
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
            writer.writeheader()
            writer.writerows(rows)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_formats_round_trip(tmp_path, fmt):
    rows = simulated_grid(noise=0.01, seed=1)
    table = load_table(_write(tmp_path, rows, fmt))
    assert len(table) == 116
    np.testing.assert_array_equal(table.r, [r["r"] for r in rows])
    np.testing.assert_allclose(table.loss, [r["loss"] for r in rows], rtol=1e-15)
    np.testing.assert_allclose(table.n, [r["n"] for r in rows])
    assert table.has_budget and sorted(set(table.budget)) == sorted({r["budget"] for r in rows})
    cells, keys = table.cells()
    assert len(keys) == 24 and np.bincount(cells).sum() == 116


def test_failed_runs_are_skipped_with_a_warning(tmp_path):
    rows = simulated_grid()
    rows[3].update(status="failed", reason="non-finite loss", loss="")
    rows[10].update(status="failed", reason="killed", loss=float("nan"))
    with pytest.warns(SkippedRunsWarning, match="skipped 2 run"):
        table = load_table(_write(tmp_path, rows, "csv"))
    assert len(table) == 114
    assert [run for run, _ in table.skipped] == [rows[3]["run"], rows[10]["run"]]
    assert "non-finite loss" in table.skipped[0][1]


def test_non_looped_params_schema_is_r1():
    table = load_table({"params": [1e7, 2e7, 4e7], "tokens": [1e9, 2e9, 3e9], "loss": [3.0, 2.9, 2.8]})
    np.testing.assert_array_equal(table.r, 1)
    np.testing.assert_array_equal(table.n_rec, 0)
    np.testing.assert_array_equal(table.n_once, [1e7, 2e7, 4e7])
    assert not table.has_budget


@pytest.mark.parametrize(
    "change,match",
    [
        ({"loss": -1.0}, "invalid loss"),
        ({"loss": float("nan")}, "invalid loss"),
        ({"tokens": 0}, "invalid tokens"),
        ({"n_once": -5}, "invalid n_once"),
        ({"n_rec": "abc"}, "invalid n_rec"),
        ({"r": 2.5}, "invalid r"),
        ({"n_once": 0, "n_rec": 0}, "invalid n_rec"),
        ({"n_once": float("inf")}, "invalid n_once"),
    ],
)
def test_bad_values_are_one_line_errors(change, match):
    rows = simulated_grid()
    rows[7].update(change)
    with pytest.raises(UserError, match=match) as exc:
        load_table(rows)
    assert "\n" not in str(exc.value) and rows[7]["run"] in str(exc.value)


def test_missing_columns(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "n_rec"} for r in simulated_grid()]
    with pytest.raises(UserError, match="missing column.*n_rec"):
        load_table(rows)
    with pytest.raises(UserError, match="missing column.*loss"):
        load_table({"params": [1.0], "tokens": [1.0]})
    with pytest.raises(UserError, match="not found"):
        load_table(tmp_path / "nope.csv")
    (tmp_path / "x.txt").write_text("a")
    with pytest.raises(UserError, match="unknown table format"):
        load_table(tmp_path / "x.txt")


def test_partial_budget_column_is_refused():
    rows = simulated_grid()
    rows[0]["budget"] = ""
    with pytest.raises(UserError, match="budget"):
        load_table(rows)


def test_ls_split_reproduces_spec_3_4(grid_table):
    ls = grid_table.with_ls_split()
    # s = 10 (d = 640): N_once^LS = 20,736,362 and n_blk^LS = 4,855,930, N_rec^LS = (16/r)·n_blk^LS.
    for r in (1, 2, 4, 8):
        i = np.flatnonzero((grid_table.width == 640) & (grid_table.r == r))[0]
        assert ls.n_once[i] == pytest.approx(20_736_362, abs=1)
        assert ls.n_rec[i] == pytest.approx(16 / r * 4_855_930, abs=16)


# V5, last column: published-law predictions with the LS split, cells (C, s, r).
V5_LS = [
    ((4.64e17, 6, 1), 2.8901),
    ((4.64e17, 6, 8), 3.0388),
    ((1e18, 10, 4), 2.8133),
    ((2.15e18, 12, 2), 2.6476),
    ((4.64e18, 20, 8), 2.5928),
    ((1e19, 20, 1), 2.4018),
    ((2.15e19, 34, 8), 2.3961),
]


def test_ls_split_predictions_v5(grid_table):
    from loopscale.fit.law import law_loss
    from loopscale.paper import JOINT_FIT

    ls = grid_table.with_ls_split()
    for (budget, s, r), expected in V5_LS:
        i = np.flatnonzero((ls.budget == budget) & (ls.width == 64 * s) & (ls.r == r))[0]
        got = float(law_loss(JOINT_FIT, ls.n_once[i], ls.n_rec[i], r, ls.tokens[i]))
        assert got == pytest.approx(expected, abs=5e-5)


def test_the_same_run_twice_is_refused_naming_it():
    rows = simulated_grid()
    with pytest.raises(UserError, match="more than once") as exc:
        load_table([*rows, dict(rows[7])])
    assert "\n" not in str(exc.value) and rows[7]["run"] in str(exc.value) and "rows 8, 117" in str(exc.value)
    nameless = [{k: v for k, v in r.items() if k != "run"} for r in rows]
    with pytest.raises(UserError, match="more than once.*rows 3, 117"):
        load_table([*nameless, dict(nameless[2])])


def test_repeated_seeds_of_one_cell_are_not_duplicates():
    rows = simulated_grid()
    seed1 = [{**r, "run": r["run"] + "-s1", "loss": r["loss"] + 0.01} for r in rows]
    assert len(load_table(rows + seed1)) == 232
    nameless = [{k: v for k, v in r.items() if k != "run"} for r in rows + seed1]
    assert len(load_table(nameless)) == 232  # same sizes and tokens, different losses


def test_n_once_zero_is_accepted_and_fits():
    """Everything counted as recurrent (N_once = 0): N_eff = r^φ·N_rec is still positive, so the law is
    defined; the loader accepts it and the objective stays finite."""
    from loopscale.fit import fit_law

    rows = [{**r, "n_once": 0.0, "n_rec": r["n"]} for r in simulated_grid(noise=0.005, seed=3)]
    table = load_table(rows)
    assert np.all(table.n_once == 0) and np.all(table.n == [r["n"] for r in rows])
    fit = fit_law(table, restarts=20, seed=0)
    assert np.isfinite(fit.objective) and np.isfinite(fit.phi) and fit.r2 > 0.9
