"""collect/report keep the task list behind every axis number (and which tasks are stand-ins)."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq

from loopscale.report.axes import axis_task_lists
from loopscale.report.document import Table
from loopscale.sweep.collect import _axis_losses
from loopscale.sweep.results import _INT_COLUMNS, RESULT_COLUMNS, read_results, write_results


def _eval_json(folder, tasks):
    folder.mkdir(parents=True)
    axes = {"parametric_knowledge": {"loss": 3.0, "tasks": tasks, "standins": ["triviaqa"], "missing": []},
            "math_word_problems": {"loss": None, "tasks": [], "standins": [], "missing": ["svamp"]}}
    (folder / "eval.json").write_text(json.dumps({"axes": axes}))


def test_axis_task_lists_travel_from_eval_json_to_the_report(tmp_path):
    _eval_json(tmp_path / "a", ["triviaqa", "nq_open"])
    _eval_json(tmp_path / "b", ["triviaqa"])
    base = {c: math.nan for c in RESULT_COLUMNS} | {"status": "ok", "run": "x", "reason": None, "group": None}
    base |= {"recipe": "muonh", **{c: 1 for c in _INT_COLUMNS}}
    rows = [base | _axis_losses(tmp_path / "a"), base | _axis_losses(tmp_path / "b")]
    rows.append(base | {"status": "failed"})
    assert rows[0]["tasks_parametric_knowledge"] == "triviaqa* nq_open"
    assert rows[0]["axis_parametric_knowledge"] == 3.0
    csv_path, parquet_path = write_results(tmp_path, rows)
    back = read_results(csv_path)
    assert [r.get("tasks_parametric_knowledge") for r in back] == ["triviaqa* nq_open", "triviaqa*", None]
    assert pq.read_table(parquet_path).column("tasks_parametric_knowledge").to_pylist()[2] is None
    note, table = axis_task_lists(back)
    assert "* marks data that differ" in note and isinstance(table, Table)
    assert sorted(table.rows) == [["math_word_problems", "–", "svamp, asdiv, mawps", "2"],
                                  ["parametric_knowledge", "triviaqa*", "nq_open, webquestions", "1"],
                                  ["parametric_knowledge", "triviaqa* nq_open", "webquestions", "1"]]


def test_axis_standard_errors_and_correlations_reach_the_report(tmp_path):
    """se_axis_<name> columns travel eval.json → results.csv → the downstream table ("loss ± se"), the
    gaps to r = 1 carry the SE of the difference, and the report correlates each axis (and their mean,
    over axes with data) with the validation loss."""
    import statistics

    from loopscale.report.axes import axes_section

    rows = []
    for i, (val, knowledge, symbolic) in enumerate([(3.0, 4.1, 5.0), (3.2, 4.4, 4.9), (3.5, 4.6, 5.3),
                                                   (3.9, 5.2, 5.1)]):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        axes = {"parametric_knowledge": {"loss": knowledge, "loss_se": 0.02, "tasks": ["nq_open"]},
                "compositional_symbolic": {"loss": symbolic, "loss_se": 0.05, "tasks": ["arc_easy"]},
                "math_word_problems": {"loss": None, "loss_se": None, "tasks": [], "missing": ["svamp"]}}
        (folder / "eval.json").write_text(json.dumps({"axes": axes}))
        base = {c: math.nan for c in RESULT_COLUMNS} | {"status": "ok", "run": f"run{i}", "reason": None,
                                                          "group": None, "recipe": "muonh"}
        base |= {c: 1 for c in _INT_COLUMNS}
        base |= {"budget": 1e12 * (1 + i // 2), "r": 1 + 3 * (i % 2), "loss": val}  # r = 1 and 4 per budget
        rows.append(base | _axis_losses(folder))
    csv_path, _ = write_results(tmp_path, rows)
    back = read_results(csv_path)
    assert back[0]["se_axis_parametric_knowledge"] == 0.02
    assert math.isnan(back[0]["se_axis_math_word_problems"])
    section = axes_section(back)
    table = section.blocks[1]
    assert table.rows[0][4:] == ["5.0000 ± 0.0500", "–", "4.1000 ± 0.0200"]
    gaps = section.blocks[3]  # r = 4 minus r = 1 at each budget, ± the SE of the difference
    assert gaps.rows[0] == ["1e12", "4", "-0.100 ± 0.071 (not resolved)", "–", "+0.300 ± 0.028"]
    correlations = section.blocks[5]
    got = {row[0]: row[1] for row in correlations.rows}
    vals = [3.0, 3.2, 3.5, 3.9]
    assert got["parametric_knowledge"] == f"{statistics.correlation(vals, [4.1, 4.4, 4.6, 5.2]):+.3f}"
    macro = [(4.1 + 5.0) / 2, (4.4 + 4.9) / 2, (4.6 + 5.3) / 2, (5.2 + 5.1) / 2]
    assert got["macro (mean of axes)"] == f"{statistics.correlation(vals, macro):+.3f}"
    assert "math_word_problems" not in got  # no data: not a number
