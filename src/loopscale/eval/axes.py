"""The paper's five evaluation axes and twenty tasks (method §10.3, Table 8), task resolution, aggregation.

A paper task is read from ``TASK_DIR/<name>.jsonl`` when that file exists (see docs/eval.md for how to
produce it from the public data set); the synthetic ones (induction head, VarAssign, Dyck languages) are
generated when their file is absent. Any other paper task without a file is reported as *missing*: it
appears in the output with its axis, and the axis is marked incomplete, instead of being dropped.

Aggregation (method §10.1): an axis's loss is the unweighted mean of its tasks' losses (over the tasks
that were evaluated); the macro loss is the unweighted mean over axes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from loopscale.errors import UserError
from loopscale.eval.generators import (
    DYCK_SEED,
    INDUCTION_SEED,
    VARASSIGN_SEED,
    dyck_examples,
    induction_head_examples,
    varassign_examples,
)
from loopscale.eval.tasks import (
    MAX_EXAMPLES,
    Example,
    Task,
    TaskMeta,
    load_task_file,
    make_task,
    missing_reasons,
)

if TYPE_CHECKING:  # continuation imports torch; the CLI imports this module to build its parser
    from loopscale.eval.continuation import TaskResult


@dataclass(frozen=True)
class PaperTask:
    """One row of Table 8. ``scored`` is the paper's number of scored examples."""

    name: str
    label: str
    axis: str
    type: str
    shots: int
    scored: int
    generate: Callable[[], list[Example]] | None = None
    generator_note: str = ""
    generator_deviation: str = ""  # how generated items differ from the paper's ("" = the paper's)

    def meta(self) -> TaskMeta:
        return TaskMeta(name=self.name, axis=self.axis, type=self.type, shots=self.shots)


_ROWS = [
    # axis, name, label, type, shots, scored
    ("parametric_knowledge", "triviaqa", "TriviaQA", "lm", 5, 10_000),
    ("parametric_knowledge", "nq_open", "NaturalQuestions", "lm", 5, 3_610),
    ("parametric_knowledge", "webquestions", "WebQuestions", "lm", 5, 2_032),
    ("reading_comprehension", "lambada_openai", "Lambada-OpenAI", "lm", 0, 5_153),
    ("reading_comprehension", "tydiqa_goldp", "TydiQA-GoldP", "lm", 3, 440),
    ("reading_comprehension", "squadv2", "SQuADv2", "lm", 3, 5_928),
    ("reading_comprehension", "drop", "DROP", "lm", 3, 9_535),
    ("reading_comprehension", "coqa", "CoQA", "lm", 1, 7_983),
    ("math_word_problems", "svamp", "SVAMP", "lm", 5, 300),
    ("math_word_problems", "asdiv", "ASDiv", "lm", 5, 2_305),
    ("math_word_problems", "mawps", "MAWPS", "lm", 5, 1_772),
    ("reasoning_primitives", "induction_head", "Induction head", "lm", 0, 1_000),
    ("reasoning_primitives", "varassign_d0_math", "VarAssign d0 (math)", "lm", 5, 1_000),
    ("reasoning_primitives", "varassign_d0_code", "VarAssign d0 (code)", "lm", 5, 1_000),
    ("reasoning_primitives", "varassign_d1_math", "VarAssign d1 (math)", "lm", 5, 1_000),
    ("reasoning_primitives", "varassign_d1_code", "VarAssign d1 (code)", "lm", 5, 1_000),
    ("compositional_symbolic", "bigbench_dyck_languages", "BigBench Dyck", "lm", 10, 1_000),
    ("compositional_symbolic", "bigbench_qa_wikidata", "BigBench QA-Wikidata", "lm", 10, 10_000),
    ("compositional_symbolic", "arc_easy", "ARC-Easy", "mc", 10, 2_376),
    ("compositional_symbolic", "bigbench_cs_algorithms", "BigBench CS-algorithms", "lm", 10, 1_320),
]

_GENERATORS: dict[str, tuple[Callable[[], list[Example]], str, str]] = {
    "induction_head": (induction_head_examples, f"generated: induction head, seed {INDUCTION_SEED}", ""),
    "bigbench_dyck_languages": (
        dyck_examples, f"generated: loopscale Dyck stand-in, seed {DYCK_SEED}",
        "loopscale's generated Dyck items, not BIG-bench's (no task file; run `loopscale eval prepare`); "
        "not comparable to the paper's Dyck losses",
    ),
    **{
        f"varassign_d{depth}_{fmt}": (
            partial(varassign_examples, depth, fmt),
            f"generated: VarAssign depth {depth} {fmt}, seed {VARASSIGN_SEED}",
            "",
        )
        for depth in (0, 1)
        for fmt in ("math", "code")
    },
}

PAPER_TASKS: dict[str, PaperTask] = {
    name: PaperTask(name, label, axis, kind, shots, scored, *_GENERATORS.get(name, (None, "", "")))
    for axis, name, label, kind, shots, scored in _ROWS
}
AXES: dict[str, tuple[str, ...]] = {
    axis: tuple(t.name for t in PAPER_TASKS.values() if t.axis == axis)
    for axis in dict.fromkeys(t.axis for t in PAPER_TASKS.values())
}
DEFAULT_TASK_DIR = Path("data/tasks")


@dataclass(frozen=True)
class MissingTask:
    """A selected paper task that could not be evaluated because its data file is absent."""

    name: str
    axis: str
    reason: str

    def to_dict(self) -> dict:
        return dict(vars(self))


def select(tasks: Sequence[str] | None = None, axes: Sequence[str] | None = None) -> list[str]:
    """Task names (or task-file paths) to evaluate: ``tasks`` as given, else every task of ``axes``, else
    all five axes. Unknown axes are a UserError."""
    if tasks:
        return list(dict.fromkeys(tasks))
    chosen = list(axes) if axes else list(AXES)
    unknown = [a for a in chosen if a not in AXES]
    if unknown:
        raise UserError(f"unknown axis {', '.join(map(repr, unknown))}; axes are: {', '.join(AXES)}")
    return [name for axis in dict.fromkeys(chosen) for name in AXES[axis]]


def load_tasks(
    selection: Sequence[str], task_dir: str | Path | None = None, *, max_examples: int = MAX_EXAMPLES
) -> tuple[list[Task], list[MissingTask]]:
    """Load each selected task (see the module docstring). An entry ending in ``.jsonl`` is a task file
    path; anything else must be a paper task name."""
    task_dir = Path(task_dir) if task_dir is not None else None
    tasks, missing = [], []
    for entry in selection:
        if entry.endswith(".jsonl"):
            path = Path(entry)
            known = PAPER_TASKS.get(path.stem)
            tasks.append(load_task_file(path, known.meta() if known else None, max_examples=max_examples))
            continue
        paper = PAPER_TASKS.get(entry)
        if paper is None:
            raise UserError(
                f"unknown task {entry!r}: give a paper task ({', '.join(PAPER_TASKS)}) or a .jsonl task file"
            )
        path = task_dir / f"{entry}.jsonl" if task_dir is not None else None
        if path is not None and path.is_file():
            tasks.append(load_task_file(path, paper.meta(), max_examples=max_examples))
        elif paper.generate is not None:
            meta = replace(paper.meta(), deviation=paper.generator_deviation)
            tasks.append(make_task(meta, paper.generate(), source=paper.generator_note,
                                   max_examples=max_examples))
        else:
            missing.append(MissingTask(entry, paper.axis, _missing_reason(entry, task_dir)))
    return tasks, missing


def _missing_reason(name: str, task_dir: Path | None) -> str:
    """Why a paper task has no data: the reason ``loopscale eval prepare`` recorded in the folder's
    MANIFEST.json, else that its file is absent."""
    if task_dir is None:
        return f"no task file {name}.jsonl (no task folder given)"
    reason = missing_reasons(task_dir).get(name)
    if reason is not None:
        return reason
    return f"no task file {task_dir / (name + '.jsonl')}; run `loopscale eval prepare` (see docs/eval.md)"


def _mean_se(errors: Sequence[float | None]) -> float | None:
    """Standard error of the mean of independent estimates with these standard errors (None when there
    are none, or when one is unknown)."""
    if not errors or any(e is None or not math.isfinite(e) for e in errors):
        return None
    return math.sqrt(sum(e * e for e in errors)) / len(errors)


def summarize(results: Sequence[TaskResult], missing: Sequence[MissingTask] = ()) -> dict:
    """Per-axis aggregation: {"axes": {axis: {...}}, "macro_loss": ..., "missing": [...]}.

    Each axis reports ``loss`` (unweighted mean of its task losses in nats, None if no task ran) and
    ``loss_se`` (its standard error from the tasks' ``loss_se``: the examples are a sample of each task),
    ``accuracy`` (same mean of accuracies), its ``tasks`` and ``missing`` names, ``standins`` (the tasks
    whose data differ from the paper's: a subset, another copy, a generated stand-in) and ``complete``.
    """
    axis_order = list(AXES) + [r.axis for r in results if r.axis not in AXES]
    axes = {}
    for axis in dict.fromkeys(axis_order):
        ran = [r for r in results if r.axis == axis]
        absent = [m.name for m in missing if m.axis == axis]
        if not ran and not absent:
            continue
        axes[axis] = {
            "loss": sum(r.loss for r in ran) / len(ran) if ran else None,
            "loss_se": _mean_se([r.loss_se for r in ran]),
            "accuracy": sum(r.accuracy for r in ran) / len(ran) if ran else None,
            "tasks": [r.name for r in ran],
            "standins": [r.name for r in ran if r.deviation],
            "missing": absent,
            "complete": not absent,
        }
    losses = [a["loss"] for a in axes.values() if a["loss"] is not None]
    return {
        "axes": axes,
        "macro_loss": sum(losses) / len(losses) if losses else None,
        "macro_loss_se": _mean_se([a["loss_se"] for a in axes.values() if a["loss"] is not None]),
        "missing": [m.to_dict() for m in missing],
    }
