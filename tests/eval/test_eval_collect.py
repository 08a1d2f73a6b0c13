"""collect/report keep the task list behind every axis number (and which tasks are stand-ins)."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq

from loopscale.report.build import _axis_task_lists
from loopscale.report.document import Table
from loopscale.sweep.collect import _INT_COLUMNS, RESULT_COLUMNS, _axis_losses, read_results, write_results


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
    note, table = _axis_task_lists(back)
    assert "* marks data that differ" in note and isinstance(table, Table)
    assert sorted(table.rows) == [["math_word_problems", "–", "svamp, asdiv, mawps", "2"],
                                  ["parametric_knowledge", "triviaqa*", "nq_open, webquestions", "1"],
                                  ["parametric_knowledge", "triviaqa* nq_open", "webquestions", "1"]]
