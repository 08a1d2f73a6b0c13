"""Evaluation tasks: the JSONL task format, its loader, and CORE-style few-shot prompts (method §10.2, §10.4).

A task file is JSON Lines. An optional first line ``{"task": {...}}`` carries the task's metadata
(``TaskMeta``); every other line is one example:

    {"task": {"name": "svamp", "axis": "math_word_problems", "type": "lm", "shots": 5}}
    {"context": "Question: Ann has 3 apples ...\\nAnswer: ", "continuation": "5"}
    {"context": "Question: Which gas ...?\\nAnswer:", "choices": ["oxygen", "helium"], "gold": 0}
    {"context": "...", "continuation": "...", "fewshot": true}

``type`` "lm" rows have ``continuation``; "mc" rows have ``choices`` and the 0-based ``gold`` index. Rows
marked ``"fewshot": true`` form a separate few-shot pool and are never scored; without such rows the
shots are drawn from the task's own (shuffled, capped) examples, excluding the item itself, as in the
authors' CORE-style evaluator.

Protocol constants: each task's scored examples are shuffled with ``random.Random(1337)`` and capped at
10,000; the shots of example ``idx`` are ``random.Random(1234 + idx).sample(...)``. Prompts do not depend on
the model or on r, so every r sees identical prompts and shot counts.

Prompt rendering (CORE convention): each shot is ``context.strip() + delimiter + gold continuation``
followed by ``fewshot_separator`` (default a blank line); the item is ``context.strip() + delimiter`` and
the scored continuation follows it.

A task folder may hold ``MANIFEST.json`` (written by ``loopscale eval prepare``, read by task resolution):
``{"tasks": {name: {...}}, "missing": {name: reason}, ...}``; ``read_manifest`` and ``missing_reasons``
read it.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopscale.config import from_dict
from loopscale.errors import UserError

TASK_TYPES = ("lm", "mc")  # continuation log-likelihood | multiple choice
SHUFFLE_SEED = 1337
FEWSHOT_SEED = 1234
MAX_EXAMPLES = 10_000
MANIFEST = "MANIFEST.json"  # a task folder's record of its files and of the paper tasks it lacks


@dataclass
class TaskMeta:
    """Task metadata: the ``{"task": {...}}`` header line of a task file.

    ``name`` defaults to the file stem, ``axis`` to "other". ``shots`` is the number of in-context
    examples per scored item; ``continuation_delimiter`` joins a context and its continuation.
    """

    name: str = ""
    axis: str = ""
    type: str = "lm"
    shots: int = 0
    continuation_delimiter: str = " "
    fewshot_separator: str = "\n\n"
    source: str = ""  # free text: where the data came from
    deviation: str = ""  # how the data differ from the paper's (a subset, another copy); "" = the paper's
    provenance: dict[str, Any] = field(default_factory=dict)  # package, version, members, licence, rows

    def validate(self) -> None:
        if self.type not in TASK_TYPES:
            raise UserError(
                f"task {self.name!r}: type must be one of {', '.join(TASK_TYPES)}, got {self.type!r}"
            )
        if self.shots < 0:
            raise UserError(f"task {self.name!r}: shots must be >= 0, got {self.shots}")


@dataclass
class ExampleRecord:
    """One example line of a task file (see the module docstring)."""

    context: str
    continuation: str | None = None
    choices: list[str] | None = None
    gold: int | None = None
    fewshot: bool = False


@dataclass(frozen=True)
class Example:
    """One task item. ``continuation`` is the gold continuation (for MC: ``choices[gold]``)."""

    context: str
    continuation: str
    choices: tuple[str, ...] = ()  # MC options; empty for LM items
    gold: int = 0

    @property
    def options(self) -> tuple[str, ...]:
        """The continuations to score: the gold one for LM, every choice for MC."""
        return self.choices or (self.continuation,)


@dataclass
class Task:
    """A loaded task: metadata, examples (shuffled, capped at 10,000) and an optional few-shot pool.

    ``scored`` are the first ``n_scored`` examples (all of them unless a quick run asked for fewer); shots
    are always drawn from all ``examples``, so a shorter run scores a subset with the same prompts.
    """

    meta: TaskMeta
    examples: list[Example]
    fewshot_pool: list[Example] | None = None  # None: shots come from ``examples`` (excluding the item)
    source: str = ""  # file path, or a description of the generator and its seed
    n_scored: int | None = None  # None: every example
    digest: str = ""  # sha256 of the metadata and all examples: what eval-sweep's resume compares

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def scored(self) -> list[Example]:
        return self.examples[: self.n_scored]


def make_task(
    meta: TaskMeta,
    examples: list[Example],
    fewshot_pool: list[Example] | None = None,
    *,
    source: str = "",
    max_examples: int = MAX_EXAMPLES,
) -> Task:
    """Build a task with the protocol applied: examples shuffled with seed 1337, then capped at 10,000.

    An empty task, or too few examples (or pool entries) to draw ``meta.shots`` distinct shots, is a
    UserError. ``max_examples`` < 10,000 scores only the first ``max_examples`` (a quick run): the same
    items and prompts as the full evaluation, fewer of them.
    """
    if max_examples < 1:
        raise UserError(f"max examples per task must be >= 1, got {max_examples}")
    if not examples:
        raise UserError(f"task {meta.name!r} has no examples to score ({source or 'no source'})")
    examples = list(examples)
    random.Random(SHUFFLE_SEED).shuffle(examples)
    examples = examples[:MAX_EXAMPLES]
    available = len(fewshot_pool) if fewshot_pool else len(examples) - 1
    if meta.shots > available:
        where = "few-shot pool entries" if fewshot_pool else "other examples"
        raise UserError(
            f"task {meta.name!r} needs {meta.shots} shots but has only {available} {where}; "
            "add examples or lower shots"
        )
    n_scored = max_examples if max_examples < len(examples) else None
    return Task(meta=meta, examples=examples, fewshot_pool=fewshot_pool or None, source=source,
                n_scored=n_scored, digest=_digest(meta, examples, fewshot_pool or []))


def _digest(meta: TaskMeta, examples: list[Example], pool: list[Example]) -> str:
    """sha256 of everything that defines a task's prompts and scores (not where it was read from)."""
    content = [vars(meta), [vars(e) for e in examples], [vars(e) for e in pool]]
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def fewshot_examples(task: Task, idx: int, shots: int | None = None) -> list[Example]:
    """The shots of scored example ``idx``: ``random.Random(1234 + idx)`` draws ``shots`` (default: the
    task's) distinct examples from the few-shot pool, or from the task's examples excluding ``idx``."""
    shots = task.meta.shots if shots is None else shots
    if shots == 0:
        return []
    rng = random.Random(FEWSHOT_SEED + idx)
    if task.fewshot_pool is not None:
        return [task.fewshot_pool[i] for i in rng.sample(range(len(task.fewshot_pool)), shots)]
    others = [i for i in range(len(task.examples)) if i != idx]
    return [task.examples[i] for i in rng.sample(others, shots)]


def render_context(task: Task, idx: int, shots: int | None = None) -> str:
    """The prompt text that precedes the scored continuation(s) of example ``idx`` with ``shots`` shots
    (default: the task's).

    It ends with the continuation delimiter; ``continuation.encode_pair`` moves trailing whitespace
    into the continuation before tokenising.
    """
    meta = task.meta
    delim = meta.continuation_delimiter
    parts = [f"{shot.context.strip()}{delim}{shot.continuation}{meta.fewshot_separator}"
             for shot in fewshot_examples(task, idx, shots)]
    parts.append(f"{task.examples[idx].context.strip()}{delim}")
    return "".join(parts)


def load_task_file(
    path: str | Path, defaults: TaskMeta | None = None, *, max_examples: int = MAX_EXAMPLES
) -> Task:
    """Load a JSONL task file (format in the module docstring).

    ``defaults`` supplies metadata the header omits (used for the paper's tasks, whose axis, type and
    shots are known); header fields override it. Malformed lines are a UserError naming file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"task file not found: {path}")
    try:
        lines = _read_lines(path)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file; task files are JSON Lines") from None
    meta_fields = dict(vars(defaults)) if defaults is not None else {}
    examples: list[Example] = []
    pool: list[Example] = []
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{lineno}: malformed JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{lineno}: expected a JSON object per line, got {type(obj).__name__}")
        if "task" in obj:
            if rows or len(obj) != 1:
                raise UserError(f'{path}:{lineno}: the {{"task": ...}} header must be the first line, alone')
            if not isinstance(obj["task"], dict):
                raise UserError(f'{path}:{lineno}: "task" must be a mapping of metadata keys')
            meta_fields.update(obj["task"])
            continue
        rows.append((lineno, obj))
    meta_fields.setdefault("name", "")
    meta_fields["name"] = meta_fields["name"] or path.stem
    meta_fields["axis"] = meta_fields.get("axis") or "other"
    meta = from_dict(TaskMeta, meta_fields, f"{path}: task")
    for lineno, obj in rows:
        record = from_dict(ExampleRecord, obj, f"{path}:{lineno}")
        example = _example(record, meta.type, f"{path}:{lineno}")
        (pool if record.fewshot else examples).append(example)
    if not examples:
        raise UserError(f"{path}: task {meta.name!r} has no examples to score")
    return make_task(meta, examples, pool or None, source=str(path), max_examples=max_examples)


def _read_lines(path: Path) -> list[str]:
    """The file's lines, broken at "\n" only: JSON strings may hold U+0085, U+2028 and other characters
    that ``str.splitlines`` would treat as line breaks (real TriviaQA questions contain U+0085)."""
    with open(path, encoding="utf-8", newline="\n") as f:
        return list(f)


def _example(record: ExampleRecord, task_type: str, where: str) -> Example:
    if task_type == "lm":
        if record.continuation is None or record.choices is not None:
            raise UserError(f'{where}: an "lm" task row needs "context" and "continuation" (no "choices")')
        if not record.continuation.strip():
            raise UserError(f"{where}: empty continuation; every row needs a non-blank gold continuation")
        return Example(context=record.context, continuation=record.continuation)
    if record.choices is None or record.gold is None or record.continuation is not None:
        raise UserError(f'{where}: an "mc" task row needs "context", "choices", "gold" (no "continuation")')
    if len(record.choices) < 2:
        raise UserError(f"{where}: a multiple-choice row needs at least 2 choices, got {len(record.choices)}")
    if not 0 <= record.gold < len(record.choices):
        raise UserError(f"{where}: gold index {record.gold} is outside 0..{len(record.choices) - 1}")
    if any(not choice.strip() for choice in record.choices):
        raise UserError(f"{where}: empty choice; every option needs non-blank text")
    return Example(
        context=record.context,
        continuation=record.choices[record.gold],
        choices=tuple(record.choices),
        gold=record.gold,
    )



def read_manifest(path: str | Path) -> dict:
    """A task folder's MANIFEST.json, or ``{"tasks": {}}`` when it is absent or unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"tasks": {}}
    return data if isinstance(data, dict) and isinstance(data.get("tasks"), dict) else {"tasks": {}}


def missing_reasons(task_dir: str | Path) -> dict[str, str]:
    """Why each paper task has no file in ``task_dir``, from its MANIFEST.json ({} without a manifest)."""
    missing = read_manifest(Path(task_dir) / MANIFEST).get("missing")
    return dict(missing) if isinstance(missing, dict) else {}
