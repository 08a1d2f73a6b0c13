"""Evaluate a checkpoint (or every finished run of a sweep) on the five axes; the eval.json document.

``eval.json`` (written atomically into each run folder by ``eval-sweep``, or wherever ``--json`` says;
``checkpoint`` and ``tokenizer`` are paths relative to the eval.json's folder, ``published``, so a
published sweep holds no absolute path of the machine; documents written before held them as given or
absolute)::

    {"checkpoint": ..., "r": r_eval, "r_train": ..., "tokenizer": ...,
     "settings": {"selection": [...], "max_examples": ..., "task_dir": ..., "r_requested": ...,
                 "task_set": {name: digest}, "shuffle_seed": 1337, "fewshot_seed": 1234},
     "tasks": {name: {loss, loss_se, accuracy, n_examples, n_tokens, axis, type, shots, shots_requested,
                      n_truncated, n_sequences, source, deviation, digest}},
     "axes": {axis: {loss, loss_se, accuracy, tasks, standins, missing, complete}},
     "macro_loss": ..., "macro_loss_se": ..., "missing": [{name, axis, reason}]}

Every loss carries ``loss_se``, its standard error (nats) over the examples scored (a task's examples are
a sample of its data; ``continuation.ratio_standard_error``); an axis's and the macro mean's follow from
their parts'.

Losses are per-token continuation losses in nats (method §10.1). The sweep's ``collect`` turns
``axes[*].loss`` into ``axis_<name>`` columns and records each axis's task list next to them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import multiprocessing
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from loopscale.config import ModelConfig, from_dict, load_yaml
from loopscale.errors import UserError
from loopscale.eval.axes import PAPER_TASKS, MissingTask, summarize
from loopscale.eval.continuation import (
    DEFAULT_BATCH_TOKENS,
    LogitsFn,
    TaskResult,
    evaluate_task,
    fit_shots,
    model_logits_fn,
)
from loopscale.eval.tasks import FEWSHOT_SEED, SHUFFLE_SEED, Task
from loopscale.io import atomic_write_json, remove_partial_writes
from loopscale.published import path_from

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

    @functools.cached_property
    def encoding_key(self) -> tuple[str, int, int]:
        """What a task's tokenised prompts depend on besides the task: (sha256 of the tokenizer, BOS id,
        model context T). Models with equal keys share ``fit_shots`` results."""
        digest = hashlib.sha256(self.tokenizer.to_str().encode("utf-8")).hexdigest()
        return digest, self.bos_id, self.seq_len

    def resolve_r(self, r: int | None) -> int:
        """The loop count to evaluate with: ``r``, or the trained r when None. A hyperconnection model
        runs at most its trained r (its scalars are per loop iteration): more is a UserError."""
        r_eval = self.r_train if r is None else int(r)
        check_loop_count(r_eval, self.model.layout, self.checkpoint)
        return r_eval

    def autocast(self) -> torch.autocast:
        """Training precision: bf16 autocast on CUDA (the logits and softcap stay fp32); nothing on CPU."""
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=str(self.device).startswith("cuda"))

    def logits_fn(self, r: int) -> LogitsFn:
        """(idx [B, T], positions [B, T]) → fp32 logits [n, vocab] at the positions, with ``r`` loops
        (full sequences, no KV cache)."""
        base = model_logits_fn(self.model, r)

        def logits(idx, positions, **packing):
            with self.autocast():
                return base(idx, positions, **packing)

        return logits


def check_loop_count(r: int, layout, where: str | Path) -> None:
    """Refuse a loop count ``r`` that the model of ``layout`` (config.Layout) cannot run: r < 1, or more
    loops than a hyperconnection model was trained with (one-line UserError naming ``where``)."""
    if r < 1:
        raise UserError(f"the loop count r must be >= 1, got {r}")
    if layout.injection == "hyperconnect" and r > layout.r:
        raise UserError(f"{where} is a hyperconnection model trained with r={layout.r}: its per-iteration "
                        f"parameters cannot run r={r} (use r <= {layout.r})")


def loop_counts(r: int | Sequence[int] | None) -> tuple[int | None, ...]:
    """``--r`` as a tuple: (None,) for the trained r, one entry per loop count otherwise; a loop count
    listed twice is a UserError."""
    if r is None:
        return (None,)
    rs = (int(r),) if isinstance(r, int) else tuple(int(v) for v in r)
    if not rs:
        return (None,)
    twice = sorted({v for v in rs if rs.count(v) > 1})
    if twice:
        raise UserError(f"--r lists {', '.join(map(str, twice))} more than once")
    return rs


def eval_file_name(rs: Sequence[int | None], r: int | None) -> str:
    """Where eval-sweep writes the evaluation at ``r`` of the loop counts ``rs`` inside a run folder:
    eval.json for a single loop count (what ``collect`` reads), eval_r<R>.json for each of several."""
    return EVAL_FILE if len(rs) == 1 else f"eval_r{r}.json"


def format_loop_curve(reports: Sequence[dict]) -> str:
    """One row per loop count: r, macro loss ± se and each axis's loss (nats per continuation token),
    from the eval.json documents of one checkpoint at several r."""
    first = reports[0]
    axes = [axis for axis in first["axes"] if any(rep["axes"][axis]["loss"] is not None for rep in reports)]
    widths = [max(len(axis), 9) for axis in axes]
    lines = [f"checkpoint {first['checkpoint']}  trained r={first['r_train']}  (loss in nats per "
             "continuation token)", ""]
    header = "".join(f"  {axis:>{w}}" for axis, w in zip(axes, widths))
    lines.append(f"{'r':>4}{'macro loss':>12}{'± se':>8}{header}")
    for rep in reports:
        macro = rep["macro_loss"]
        row = f"{rep['r']:>4}" + (f"{macro:>12.4f}" if macro is not None else f"{'-':>12}")
        row += f"{_se(rep.get('macro_loss_se')):>8}"
        for axis, w in zip(axes, widths):
            loss = rep["axes"][axis]["loss"]
            row += f"  {loss:>{w}.4f}" if loss is not None else f"  {'-':>{w}}"
        lines.append(row)
    return "\n".join(lines)


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


def load_eval_model(checkpoint: str | Path, tokenizer: str | Path | None = None, device: str | None = None,
                    compile: bool = False) -> EvalModel:
    """Load a run folder or checkpoint folder and the tokenizer it was trained with; with ``compile`` the
    scoring pass (``logits_at``) is compiled with ``torch.compile(dynamic=True)``: 1.4× faster once
    compiled, after about a minute of compiling per model (benchmarks/RESULTS.md), so it pays only for
    long evaluations.

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
        dataset = PackedDataset(resolve_data_path(cfg.data.path, checkpoint))
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
    if compile:
        model.logits_at = torch.compile(model.logits_at, dynamic=True)  # the instance's scoring pass only
    return EvalModel(model, tok, bos_id, checkpoint, tok_path, device)


def resolve_data_path(data_path: str | Path, checkpoint: str | Path) -> Path:
    """A run config's ``data.path``: an absolute path as it is; a relative one against the checkpoint's
    folder and each folder above it (run folder, sweep root, the folder the sweep was started from),
    the first that exists, else against the current directory."""
    path = Path(data_path)
    if path.is_absolute():
        return path
    start = Path(checkpoint).resolve()
    for base in (start, *start.parents):
        if (base / path).exists():
            return base / path
    return path


def evaluate_model(
    loaded: EvalModel,
    tasks: Sequence[Task],
    missing: Sequence[MissingTask] = (),
    *,
    r: int | None = None,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    settings: dict | None = None,
    progress=None,
    reuse: Mapping[str, TaskResult] | None = None,
    encodings: dict | None = None,
) -> dict:
    """Evaluate ``tasks`` with ``r`` loops (None: the trained r); the eval.json document (module docstring).

    ``reuse`` holds results of an earlier evaluation with the same settings, by task name; a task whose
    digest matches is taken from it instead of being scored again. ``progress(task_result)`` is called
    after each task scored. ``encodings`` is a cache of tokenised tasks (``fit_shots`` results) keyed by
    task digest and ``loaded.encoding_key``, filled as tasks are tokenised: pass the same dict for every
    model of a sweep and each task is tokenised once.
    """
    r_eval = loaded.resolve_r(r)
    logits_fn = loaded.logits_fn(r_eval)
    reuse = reuse or {}
    results = []
    for task in tasks:
        earlier = reuse.get(task.name)
        if earlier is not None and earlier.digest == task.digest:
            results.append(earlier)
            continue
        prepared = None
        if encodings is not None:
            key = (task.digest, *loaded.encoding_key)
            if key not in encodings:
                encodings[key] = fit_shots(task, loaded.tokenizer, loaded.bos_id, loaded.seq_len)
            prepared = encodings[key]
        result = evaluate_task(task, loaded.tokenizer, loaded.bos_id, logits_fn, max_len=loaded.seq_len,
                               max_batch_tokens=max_batch_tokens, device=loaded.device, prepared=prepared)
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
        "settings": {**(settings or {}), "task_set": {task.name: task.digest for task in tasks},
                     "shuffle_seed": SHUFFLE_SEED, "fewshot_seed": FEWSHOT_SEED},
        "tasks": {res.name: res.to_dict() for res in results},
        **summarize(results, missing),
    }


def published(report: dict, folder: str | Path) -> dict:
    """The eval.json document ``report`` as written into ``folder``: its checkpoint and tokenizer paths
    relative to that folder."""
    paths = {key: path_from(folder, report[key]) for key in ("checkpoint", "tokenizer") if report.get(key)}
    return {**report, **paths}


def format_report(report: dict) -> str:
    """Per-task and per-axis table of an eval.json document (losses in nats per continuation token).

    ``± se`` is the loss's standard error over the sampled examples (``--limit`` draws a sample of each
    task: compare two runs' losses against it); ``shots`` shows used/requested when the prompts did not
    fit; ``cut`` is the share of sequences cut
    from the left to the model context; a ``*`` marks a task whose data differ from the paper's (listed
    under the table with how)."""
    lines = [f"checkpoint {report['checkpoint']}  r_eval={report['r']} (trained r={report['r_train']})", ""]
    lines.append(f"{'task':<26}{'axis':<24}{'type':<5}{'shots':>6}{'n':>7}{'tokens':>9}{'loss':>9}{'± se':>8}"
                 f"{'acc':>7}{'cut':>6}  source")
    tasks, reasons = report["tasks"], {m["name"]: m["reason"] for m in report["missing"]}
    for axis, entry in report["axes"].items():
        for name in entry["tasks"]:
            t = tasks[name]
            label = _label(name) + ("*" if t["deviation"] else "")
            requested = t["shots_requested"]
            shots = f"{t['shots']}/{requested}" if t["shots"] != requested else str(t["shots"])
            cut = t["n_truncated"] / t["n_sequences"]
            source = "generated" if t["source"].startswith("generated") else Path(t["source"]).name
            lines.append(f"{label:<26}{axis:<24}{t['type']:<5}{shots:>6}{t['n_examples']:>7}{t['n_tokens']:>9}"
                         f"{t['loss']:>9.4f}{_se(t.get('loss_se')):>8}{t['accuracy']:>7.3f}{cut:>6.0%}"
                         f"  {source}")
        for name in entry["missing"]:
            lines.append(f"{_label(name):<26}{axis:<24}missing: {reasons.get(name, 'no task file')}")
    lines += ["", f"{'axis':<26}{'loss':>9}{'± se':>8}{'acc':>7}  tasks"]
    for axis, entry in report["axes"].items():
        n_ran, n_all = len(entry["tasks"]), len(entry["tasks"]) + len(entry["missing"])
        coverage = f"{n_ran}/{n_all}"
        if not entry["complete"]:
            coverage += f", missing {', '.join(entry['missing'])}"
        if entry["standins"]:
            coverage += f"; stand-in data: {', '.join(entry['standins'])}"
        if entry["loss"] is None:
            lines.append(f"{axis:<26}{'-':>9}{'':>8}{'-':>7}  {coverage}")
        else:
            lines.append(f"{axis:<26}{entry['loss']:>9.4f}{_se(entry.get('loss_se')):>8}"
                         f"{entry['accuracy']:>7.3f}  {coverage}")
    if report["macro_loss"] is not None:
        macro_se = _se(report.get("macro_loss_se"))
        lines.append(f"{'macro (mean of axes)':<26}{report['macro_loss']:>9.4f}{macro_se:>8}")
    notes = [f"* {_label(name)}: {t['deviation']}" for name, t in tasks.items() if t["deviation"]]
    reduced = [name for name, t in tasks.items() if t["shots"] != t["shots_requested"]]
    if reduced:
        notes.append("fewer shots than requested, as more than 10% of the prompts would be cut to the model "
                     f"context: {', '.join(reduced)}")
    return "\n".join(lines + ([""] + notes if notes else []))


def _se(value) -> str:
    """A standard error for the tables ("–" when unknown, e.g. one example or an older eval.json)."""
    return f"{value:.4f}" if isinstance(value, float) and math.isfinite(value) else "–"


def _label(name: str) -> str:
    return PAPER_TASKS[name].label if name in PAPER_TASKS else name


def eval_sweep(
    sweep_dir: str | Path,
    tasks: Sequence[Task],
    missing: Sequence[MissingTask] = (),
    *,
    r: int | Sequence[int] | None = None,
    tokenizer: str | Path | None = None,
    device: str | None = None,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    settings: dict | None = None,
    force: bool = False,
    workers: int | None = None,
    threads: int | None = None,
    compile: bool = False,
    log=print,
) -> dict[str, int]:
    """Evaluate every finished (status ok) run of a sweep folder (``SWEEP_DIR/runs/NAME``), writing
    ``eval.json`` atomically into each run folder; failed and unfinished runs are skipped. ``r``: the loop
    count (None: each run's trained r), or several, one evaluation each, written to ``eval_r<R>.json``
    (``eval_file_name``); a loop count a run's model cannot run (more than a hyperconnection model was
    trained with) is a UserError before anything is evaluated.

    Resumable by task: a run whose eval.json has the same settings (task selection, cap, task folder,
    requested r) keeps the results of every task whose content digest is unchanged and scores only the
    tasks that are new or changed (a task file added or rewritten by ``loopscale eval prepare``); a run
    with nothing new is "done". ``force`` scores everything again.

    ``workers`` evaluations run at once, each in its own process with ``threads`` CPU threads (None:
    ``sweep.plan.local_layout``, as ``loopscale sweep`` lays out its runs: one single-threaded
    evaluation per core for small CPU models, else one with torch's threads). Each process tokenises a
    task once for all the runs it evaluates. Interrupted, it loses only the runs in flight (each eval.json
    is written whole or not at all). Returns counts of evaluated / done (one per run and loop count) and
    skipped runs."""
    from loopscale.sweep.plan import local_layout
    from loopscale.sweep.rundir import run_dir, run_names, run_state

    root = Path(sweep_dir)
    names = run_names(root)
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    rs = loop_counts(r)
    settings = dict(settings or {})
    wanted = {task.name: task.digest for task in tasks}
    counts = {"evaluated": 0, "done": 0, "skipped": 0}
    todo: list[tuple[Path, int | None, str, dict[str, TaskResult]]] = []
    for name in names:
        state = run_state(root, name)
        if state.status != "ok":
            log(f"{name}: skipped ({state.status}: {state.reason})")
            counts["skipped"] += 1
            continue
        folder = run_dir(root, name)
        _check_run_loops(folder, rs)
        for r_eval in rs:
            out = folder / eval_file_name(rs, r_eval)
            earlier = {} if force else reusable_results(out, {**settings, "r_requested": r_eval})
            if {n: res.digest for n, res in earlier.items()} == wanted and _same_missing(out, missing):
                log(f"{name}: done ({out})")
                counts["done"] += 1
                continue
            todo.append((folder, r_eval, out.name, earlier))
    if not todo:
        return counts
    if workers is None:
        layout = local_layout(device, [_run_width(folder) for folder, *_ in todo])
        log(f"eval-sweep: {len(todo)} run(s) to evaluate, {layout.why}")
        workers = layout.workers
    workers = min(workers, len(todo))
    if threads is None and workers > 1 and str(device or "cpu").startswith("cpu"):
        threads = max(1, (os.cpu_count() or 1) // workers)  # share the cores, do not oversubscribe them
    job = _SweepJob(tuple(tasks), tuple(missing), tokenizer, device, max_batch_tokens, settings, threads,
                    compile)
    if workers == 1:
        _init_worker(job)
        for line in map(_evaluate_run, todo):
            log(line)
            counts["evaluated"] += 1
        return counts
    # workers are born ignoring Ctrl-C (an ignored signal stays ignored across exec): the parent alone
    # handles it, by terminating the pool, so no worker prints a traceback of its own
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pool = multiprocessing.get_context("spawn").Pool(workers, _init_worker, (job,))
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        for line in pool.imap_unordered(_evaluate_run, todo):
            log(line)
            counts["evaluated"] += 1
        pool.close()
    except BaseException:
        pool.terminate()  # Ctrl-C or a failed run: stop the others (their eval.json are not half-written)
        pool.join()
        for folder, _, out_name, _ in todo:  # a worker stopped mid-write leaves its temporary file
            remove_partial_writes(folder / out_name)
        raise
    pool.join()
    return counts


@dataclass(frozen=True)
class _SweepJob:
    """What every evaluation of one ``eval_sweep`` shares (sent once to each worker process)."""

    tasks: tuple[Task, ...]
    missing: tuple[MissingTask, ...]
    tokenizer: str | Path | None
    device: str | None
    max_batch_tokens: int
    settings: dict
    threads: int | None
    compile: bool = False


_JOB: _SweepJob | None = None
_ENCODINGS: dict = {}  # this process's tokenised tasks, shared by the runs it evaluates
_LOADED: dict = {}  # the model this process evaluated last, by run folder


def _init_worker(job: _SweepJob) -> None:
    global _JOB
    _JOB = job
    _ENCODINGS.clear()
    _LOADED.clear()
    if job.threads is not None:
        torch.set_num_threads(job.threads)


def _evaluate_run(item: tuple[Path, int | None, str, dict[str, TaskResult]]) -> str:
    """Evaluate one run folder at one loop count with the process's job and write its eval.json (or
    eval_r<R>.json); the log line."""
    folder, r, out_name, earlier = item
    job = _JOB
    assert job is not None, "_init_worker sets the job first"
    loaded = _LOADED.get(folder)
    if loaded is None:  # the same run at several r: loaded once per process
        _LOADED.clear()
        loaded = _LOADED[folder] = load_eval_model(folder, job.tokenizer, job.device, job.compile)
    report = evaluate_model(loaded, job.tasks, job.missing, r=r, max_batch_tokens=job.max_batch_tokens,
                            settings={**job.settings, "r_requested": r}, reuse=earlier, encodings=_ENCODINGS)
    out = folder / out_name
    atomic_write_json(out, published(report, folder))
    kept = sum(1 for task in job.tasks if task.name in earlier and earlier[task.name].digest == task.digest)
    return (f"{folder.name}: r={report['r']} macro loss {report['macro_loss']:.4f} nats "
            f"({len(job.tasks) - kept} task(s) scored, {kept} kept) -> {out}")


def _check_run_loops(folder: Path, rs: Sequence[int | None]) -> None:
    """Refuse loop counts the run's model cannot run (``check_loop_count``), from its config.yaml; an
    unreadable config is left to the loader's own error."""
    try:
        layout = from_dict(ModelConfig, load_yaml(folder / "config.yaml")["model"], "model").layout()
    except (UserError, KeyError, TypeError):
        return
    for r in rs:
        if r is not None:
            check_loop_count(r, layout, folder)


def _run_width(folder: Path) -> int:
    """Model width of a run folder's resolved config (0 when unreadable: then it does not decide)."""
    try:
        return int(load_yaml(folder / "config.yaml")["model"]["width"])
    except (UserError, ValueError, TypeError, KeyError):
        return 0


def reusable_results(path: Path, settings: dict) -> dict[str, TaskResult]:
    """The task results of eval.json ``path`` if it was produced with ``settings``, by task name; {} when
    the file is absent, corrupt or from other settings (then everything is scored again)."""
    try:
        existing = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    if not isinstance(existing, dict) or not isinstance(existing.get("settings"), dict):
        return {}
    if any(existing["settings"].get(key) != value for key, value in settings.items()):
        return {}
    results = {}
    for name, entry in (existing.get("tasks") or {}).items():
        with contextlib.suppress(UserError):
            results[name] = from_dict(TaskResult, entry, f"{path}: task {name}")
    return results


def _same_missing(path: Path, missing: Sequence[MissingTask]) -> bool:
    """True if eval.json ``path`` lists exactly ``missing`` (a reason may change without a rerun)."""
    try:
        listed = json.loads(path.read_text()).get("missing") or []
    except (OSError, ValueError, AttributeError):
        return False
    return sorted(m.get("name") for m in listed if isinstance(m, dict)) == sorted(m.name for m in missing)
