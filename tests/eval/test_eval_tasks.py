"""Task files, task resolution and per-axis aggregation."""

from __future__ import annotations

import json
import random

import pytest

from loopscale.errors import UserError
from loopscale.eval.axes import AXES, PAPER_TASKS, MissingTask, load_tasks, select, summarize
from loopscale.eval.continuation import TaskResult
from loopscale.eval.tasks import Example, TaskMeta, fewshot_examples, load_task_file


def write_jsonl(path, rows, header=None):
    lines = ([json.dumps({"task": header})] if header is not None else []) + [json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_lm_file_with_header(tmp_path):
    rows = [{"context": f"Question: {i}?\nAnswer: ", "continuation": str(i)} for i in range(8)]
    path = write_jsonl(tmp_path / "mine.jsonl", rows, {"axis": "custom", "shots": 2, "source": "hand-made"})
    task = load_task_file(path)
    assert task.name == "mine" and task.meta.axis == "custom" and task.meta.shots == 2
    assert sorted(e.continuation for e in task.examples) == [str(i) for i in range(8)]
    order = [Example(r["context"], r["continuation"]) for r in rows]
    random.Random(1337).shuffle(order)
    assert task.examples == order


def test_mc_file_and_fewshot_pool(tmp_path):
    rows = [{"context": f"Q{i}", "choices": ["a", "b", "c"], "gold": i % 3} for i in range(4)]
    rows += [{"context": f"S{i}", "choices": ["x", "y"], "gold": 1, "fewshot": True} for i in range(3)]
    task = load_task_file(write_jsonl(tmp_path / "m.jsonl", rows, {"type": "mc", "shots": 2}))
    assert len(task.examples) == 4 and len(task.fewshot_pool) == 3
    assert {e.continuation for e in task.fewshot_pool} == {"y"}
    for idx in range(4):
        shots = fewshot_examples(task, idx)
        assert len(shots) == 2 and all(s in task.fewshot_pool for s in shots)


def test_paper_task_file_takes_registry_defaults(tmp_path):
    rows = [{"context": f"Question: q{i}\nAnswer: ", "continuation": f"a{i}"} for i in range(10)]
    write_jsonl(tmp_path / "svamp.jsonl", rows)
    (task,), missing = load_tasks(["svamp", "webquestions"], tmp_path)
    assert task.meta.axis == "math_word_problems" and task.meta.shots == 5
    assert task.source.endswith("svamp.jsonl")
    assert missing == [MissingTask("webquestions", "parametric_knowledge", missing[0].reason)]
    assert "webquestions.jsonl" in missing[0].reason


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"context": "a", "continuation": "b"\n', "malformed JSON"),
        ('[1, 2]\n', "expected a JSON object"),
        ('{"context": "a", "answer": "b"}\n', "unknown key"),
        ('{"continuation": "b"}\n', "context"),
        ('{"context": "a"}\n', '"lm" task row needs'),
        ('{"context": "a", "continuation": "  "}\n', "empty continuation"),
        ('{"task": {"type": "mc"}}\n{"context": "a", "choices": ["x", "y"], "gold": 2}\n', "gold index 2"),
        ('{"task": {"type": "mc"}}\n{"context": "a", "choices": ["x"], "gold": 0}\n', "at least 2 choices"),
        ('{"task": {"type": "qa"}}\n{"context": "a", "continuation": "b"}\n', "type must be one of"),
        ('{"context": "a", "continuation": "b"}\n{"task": {"shots": 1}}\n', "must be the first line"),
        ('{"task": {"shots": 3}}\n{"context": "a", "continuation": "b"}\n'
         '{"context": "c", "continuation": "d"}\n', "needs 3 shots"),
        ("", "no examples"),
        ('{"task": {"name": "x"}}\n\n', "no examples"),
        ('{"context": "a", "continuation": "b", "fewshot": true}\n', "no examples"),
    ],
)
def test_malformed_or_empty_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(UserError, match=message) as info:
        load_task_file(path)
    assert "\n" not in str(info.value)


def test_error_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"context": "a", "continuation": "b"}\n\n{"context": 1, "continuation": [1]}\n')
    with pytest.raises(UserError, match=r"bad\.jsonl:3"):
        load_task_file(path)


def test_selection_and_unknowns(tmp_path):
    assert select(None, ["reasoning_primitives"]) == list(AXES["reasoning_primitives"])
    assert select(None, None) == [name for names in AXES.values() for name in names]
    assert len(select(None, None)) == 20
    with pytest.raises(UserError, match="unknown axis 'nope'"):
        select(None, ["nope"])
    with pytest.raises(UserError, match="unknown task 'nope'"):
        load_tasks(["nope"], tmp_path)
    with pytest.raises(UserError, match="task file not found"):
        load_tasks([str(tmp_path / "absent.jsonl")], tmp_path)


def test_default_evaluation_generates_synthetic_tasks_and_reports_the_rest_missing(tmp_path):
    tasks, missing = load_tasks(select(None, None), tmp_path, max_examples=5)
    assert {t.name for t in tasks} == {"induction_head", "varassign_d0_math", "varassign_d0_code",
                                       "varassign_d1_math", "varassign_d1_code", "bigbench_dyck_languages"}
    assert all(len(t.scored) == 5 and len(t.examples) == 1000 for t in tasks)
    assert {m.name for m in missing} == set(PAPER_TASKS) - {t.name for t in tasks}


def _result(name, axis, loss, acc=0.5, deviation=""):
    return TaskResult(name, axis, "lm", 0, 10, 20, loss, acc, 0, "test", deviation=deviation)


def test_axis_is_unweighted_mean_and_missing_tasks_are_reported():
    results = [_result("triviaqa", "parametric_knowledge", 3.0, deviation="a subset"),
               _result("nq_open", "parametric_knowledge", 2.0),
               _result("svamp", "math_word_problems", 1.0, acc=0.25), _result("mine", "custom", 4.0)]
    missing = [MissingTask("webquestions", "parametric_knowledge", "no file"),
               MissingTask("drop", "reading_comprehension", "no file")]
    summary = summarize(results, missing)
    axes = summary["axes"]
    assert axes["parametric_knowledge"]["loss"] == pytest.approx(2.5)
    assert axes["parametric_knowledge"]["missing"] == ["webquestions"]
    assert not axes["parametric_knowledge"]["complete"]
    assert axes["parametric_knowledge"]["standins"] == ["triviaqa"]
    assert axes["math_word_problems"] == {"loss": 1.0, "loss_se": None, "accuracy": 0.25, "tasks": ["svamp"],
                                          "standins": [], "missing": [], "complete": True}
    assert axes["reading_comprehension"]["loss"] is None
    assert list(axes) == ["parametric_knowledge", "reading_comprehension", "math_word_problems", "custom"]
    assert summary["macro_loss"] == pytest.approx((2.5 + 1.0 + 4.0) / 3)
    assert [m["name"] for m in summary["missing"]] == ["webquestions", "drop"]


def test_unicode_line_separators_inside_json_strings_do_not_break_lines(tmp_path):
    # TriviaQA rc validation, question sfq_3105: U+0085 (NEXT LINE) inside the question, written raw as
    # json.dumps(..., ensure_ascii=False) does; str.splitlines() used to split the row in two.
    question = "Complete the title of the Woody Allen directed film 'Vicky Christina \x85."
    rows = [{"context": f"Question: {question}\nAnswer: ", "continuation": "Barcelona"},
            {"context": "Question: a\u2028b\u2029c\x1cd\nAnswer: ", "continuation": "e"}]
    path = tmp_path / "triviaqa.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    task = load_task_file(path, TaskMeta(shots=1))
    assert sorted(e.continuation for e in task.examples) == ["Barcelona", "e"]
    assert any(question in e.context for e in task.examples)
