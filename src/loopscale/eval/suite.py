"""Evaluate a checkpoint (or every finished run of a sweep) on the five axes; the eval.json document.

``eval.json`` (written atomically into each run folder by ``eval-sweep``, or wherever ``--json`` says)::

    {"checkpoint": ..., "r": r_eval, "r_train": ..., "tokenizer": ...,
     "settings": {"selection": [...], "max_examples": ..., "shuffle_seed": 1337, "fewshot_seed": 1234},
     "tasks": {name: {loss, accuracy, n_examples, n_tokens, axis, type, shots, n_truncated, source}},
     "axes": {axis: {loss, accuracy, tasks, missing, complete}},
     "macro_loss": ..., "missing": [{name, axis, reason}]}

Losses are per-token continuation losses in nats (method §10.1). The sweep's ``collect`` turns
``axes[*].loss`` into ``axis_<name>`` columns.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from loopscale.errors import UserError
from loopscale.eval.axes import PAPER_TASKS, MissingTask, summarize
from loopscale.eval.continuation import DEFAULT_BATCH_TOKENS, LogitsFn, evaluate_task, model_logits_fn
from loopscale.eval.tasks import FEWSHOT_SEED, SHUFFLE_SEED, Task
from loopscale.io import atomic_write_json

EVAL_FILE = "eval.json"


@dataclass
class EvalModel:
    """A checkpoint ready to score: the model, its tokenizer and BOS id, and where they came from."""

    model: torch.nn.Module  # loopscale.model.LoopedGPT
    tokenizer: Tokenizer
    bos_id: int
    checkpoint: Path
    tokenizer_path: Path | None
    device: str

    @property
    def r_train(self) -> int:
        return self.model.layout.r

    @property
    def seq_len(self) -> int:
        return self.model.cfg.seq_len

    def resolve_r(self, r: int | None) -> int:
        """The loop count to evaluate with: ``r``, or the trained r when None."""
        r_eval = self.r_train if r is None else int(r)
        if r_eval < 1:
            raise UserError(f"the loop count r must be >= 1, got {r_eval}")
        return r_eval

    def autocast(self) -> torch.autocast:
        """Training precision: bf16 autocast on CUDA (the logits and softcap stay fp32); nothing on CPU."""
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=str(self.device).startswith("cuda"))

    def logits_fn(self, r: int) -> LogitsFn:
        """idx [B, T] → fp32 logits [B, T, vocab] with ``r`` loops (full sequences, no KV cache)."""
        base = model_logits_fn(self.model, r)

        def logits(idx):
            with self.autocast():
                return base(idx)

        return logits


def resolve_device(device: str | None) -> str:
    """``device`` checked (a CUDA device needs CUDA), or cuda when available, else cpu."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise UserError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but CUDA is not available; use --device cpu")
    return device


def load_eval_model(checkpoint: str | Path, tokenizer: str | Path | None = None, device: str | None = None
                    ) -> EvalModel:
    """Load a run folder or checkpoint folder and the tokenizer it was trained with.

    The tokenizer is the training data set's (``TrainConfig.data.path``); ``tokenizer`` overrides it. A
    tokenizer whose vocabulary differs from the one the checkpoint was trained with (or whose size
    differs from the model's) is a UserError: scores under another tokenizer are meaningless.
    """
    from loopscale.data import PackedDataset, find_bos_id, load_tokenizer
    from loopscale.train import load_checkpoint_model

    checkpoint = Path(checkpoint)
    if not checkpoint.exists():
        raise UserError(f"checkpoint not found: {checkpoint}")
    device = resolve_device(device)
    model, cfg = load_checkpoint_model(checkpoint)
    vocab_size = model.cfg.vocab_size
    dataset = None
    with contextlib.suppress(UserError):
        dataset = PackedDataset(cfg.data.path)
    trained_path = dataset.tokenizer_path if dataset is not None else None
    if tokenizer is None and trained_path is None:
        raise UserError(
            f"the tokenizer of {checkpoint} is unknown (its data set {cfg.data.path} is not available or has "
            "no tokenizer.json); pass --tokenizer"
        )
    tok_path = Path(tokenizer) if tokenizer is not None else trained_path
    tok = load_tokenizer(tok_path)
    if trained_path is not None and tokenizer is not None:
        if tok.get_vocab() != load_tokenizer(trained_path).get_vocab():
            raise UserError(
                f"{checkpoint} was trained with the tokenizer {trained_path}, not {tokenizer}; "
                "drop --tokenizer or pass the matching one"
            )
    if tok.get_vocab_size() != vocab_size:
        raise UserError(
            f"{checkpoint} has a {vocab_size}-token vocabulary but tokenizer {tok_path} has "
            f"{tok.get_vocab_size()}: the checkpoint comes from another tokenizer"
        )
    if tokenizer is None and dataset is not None and dataset.bos_id is not None:
        bos_id = int(dataset.bos_id)
    else:
        bos_id = find_bos_id(tok)
    model.to(device).eval()
    return EvalModel(model, tok, bos_id, checkpoint, tok_path, device)


def evaluate_model(
    loaded: EvalModel,
    tasks: Sequence[Task],
    missing: Sequence[MissingTask] = (),
    *,
    r: int | None = None,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    settings: dict | None = None,
    progress=None,
) -> dict:
    """Evaluate ``tasks`` with ``r`` loops (None: the trained r); the eval.json document (module docstring).

    ``progress(task_result)`` is called after each task.
    """
    r_eval = loaded.resolve_r(r)
    logits_fn = loaded.logits_fn(r_eval)
    results = []
    for task in tasks:
        result = evaluate_task(task, loaded.tokenizer, loaded.bos_id, logits_fn, max_len=loaded.seq_len,
                               max_batch_tokens=max_batch_tokens, device=loaded.device)
        if not math.isfinite(result.loss):
            raise UserError(f"task {task.name!r}: non-finite continuation loss ({result.loss}); "
                            "the checkpoint has diverged")
        results.append(result)
        if progress is not None:
            progress(result)
    return {
        "checkpoint": str(loaded.checkpoint),
        "r": r_eval,
        "r_train": loaded.r_train,
        "tokenizer": str(loaded.tokenizer_path) if loaded.tokenizer_path else None,
        "settings": {**(settings or {}), "shuffle_seed": SHUFFLE_SEED, "fewshot_seed": FEWSHOT_SEED},
        "tasks": {res.name: res.to_dict() for res in results},
        **summarize(results, missing),
    }


def format_report(report: dict) -> str:
    """Per-task and per-axis table of an eval.json document (losses in nats per continuation token)."""
    lines = [f"checkpoint {report['checkpoint']}  r_eval={report['r']} (trained r={report['r_train']})", ""]
    lines.append(f"{'task':<26}{'axis':<24}{'type':<5}{'shots':>5}{'n':>7}{'tokens':>9}{'loss':>9}{'acc':>7}"
                 "  source")
    tasks = report["tasks"]
    for axis, entry in report["axes"].items():
        for name in entry["tasks"]:
            t = tasks[name]
            label = PAPER_TASKS[name].label if name in PAPER_TASKS else name
            source = "generated" if t["source"].startswith("generated") else Path(t["source"]).name
            lines.append(f"{label:<26}{axis:<24}{t['type']:<5}{t['shots']:>5}{t['n_examples']:>7}"
                         f"{t['n_tokens']:>9}{t['loss']:>9.4f}{t['accuracy']:>7.3f}  {source}")
        for name in entry["missing"]:
            label = PAPER_TASKS[name].label if name in PAPER_TASKS else name
            lines.append(f"{label:<26}{axis:<24}{'missing (no task file)':>37}")
    lines += ["", f"{'axis':<26}{'loss':>9}{'acc':>7}  tasks"]
    for axis, entry in report["axes"].items():
        n_ran, n_all = len(entry["tasks"]), len(entry["tasks"]) + len(entry["missing"])
        coverage = f"{n_ran}/{n_all}"
        if not entry["complete"]:
            coverage += f", missing {', '.join(entry['missing'])}"
        if entry["loss"] is None:
            lines.append(f"{axis:<26}{'-':>9}{'-':>7}  {coverage}")
        else:
            lines.append(f"{axis:<26}{entry['loss']:>9.4f}{entry['accuracy']:>7.3f}  {coverage}")
    if report["macro_loss"] is not None:
        lines.append(f"{'macro (mean of axes)':<26}{report['macro_loss']:>9.4f}")
    return "\n".join(lines)


def eval_sweep(
    sweep_dir: str | Path,
    tasks: Sequence[Task],
    missing: Sequence[MissingTask] = (),
    *,
    r: int | None = None,
    tokenizer: str | Path | None = None,
    device: str | None = None,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    settings: dict | None = None,
    force: bool = False,
    log=print,
) -> dict[str, int]:
    """Evaluate every finished (status ok) run of a sweep folder (``SWEEP_DIR/runs/NAME``), writing
    ``eval.json`` atomically into each run folder; failed and unfinished runs are skipped. Resumable: a
    run whose eval.json has the same settings (task selection, cap, task folder, requested r) is not
    evaluated again unless ``force``. Returns counts of evaluated / done / skipped runs."""
    from loopscale.sweep.rundir import run_dir, run_state

    root = Path(sweep_dir)
    if not (root / "runs").is_dir():
        raise UserError(f"{root} is not a sweep folder (no runs/ folder); run `loopscale sweep` first")
    names = sorted(p.name for p in (root / "runs").iterdir() if p.is_dir())
    settings = {**(settings or {}), "r_requested": r}
    counts = {"evaluated": 0, "done": 0, "skipped": 0}
    for name in names:
        state = run_state(root, name)
        if state.status != "ok":
            log(f"{name}: skipped ({state.status}: {state.reason})")
            counts["skipped"] += 1
            continue
        out = run_dir(root, name) / EVAL_FILE
        if not force and _has_settings(out, settings):
            log(f"{name}: done ({out})")
            counts["done"] += 1
            continue
        loaded = load_eval_model(run_dir(root, name), tokenizer, device)
        report = evaluate_model(loaded, tasks, missing, r=r, max_batch_tokens=max_batch_tokens,
                                settings=settings)
        atomic_write_json(out, report)
        macro = report["macro_loss"]
        log(f"{name}: r={report['r']} macro loss {macro:.4f} nats -> {out}")
        counts["evaluated"] += 1
    return counts


def _has_settings(path: Path, settings: dict) -> bool:
    """True if ``path`` is a complete eval.json produced with ``settings`` (a corrupt file is redone)."""
    if not path.is_file():
        return False
    try:
        existing = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    if not isinstance(existing, dict) or not isinstance(existing.get("settings"), dict):
        return False
    return all(existing["settings"].get(key) == value for key, value in settings.items())
