"""Evaluate a finished looped run on its validation tokens at test-time loop counts {1, r/2, r, 2r}.

The loss at the trained r re-computes the run's published val loss (same tokens, micro-batch and thread
count), so every evaluation carries its own check: ``TestTimeRun.reproduction_gap``. A run whose weights
were not kept (a published base: weights are never committed) is evaluated from a retraining of its own
config.yaml, found as ``<weights_from>/<run name>``; that retraining's final val loss is recorded beside
the published one.
"""

from __future__ import annotations

from pathlib import Path

import torch

from loopscale.errors import UserError
from loopscale.io import atomic_write_json
from loopscale.pairs.results import TEST_TIME_SCHEMA, TestTimeRun
from loopscale.pairs.test_time import TEST_TIME_FILE, eval_loop_counts
from loopscale.sweep.rundir import read_json, read_record
from loopscale.train import checkpoint as ckpt

RETRAIN_HINT = "loopscale train --config {run}/config.yaml --out {into}/{name} --threads {threads}"


def weights_folder(run: Path, weights_from: Path | None) -> tuple[Path, str] | None:
    """Where ``run``'s final weights are → (folder, "run" | "retrained"), None where there are none."""
    if (run / ckpt.WEIGHTS).is_file():
        return run, "run"
    if weights_from is not None and (weights_from / run.name / ckpt.WEIGHTS).is_file():
        return weights_from / run.name, "retrained"
    return None


def evaluate_run(run: Path, weights_from: Path | None = None, force: bool = False) -> TestTimeRun:
    """``run``'s TestTimeRun: read from its test_time.json when there (unless ``force``), else evaluated
    and written there atomically. A run without weights is a UserError naming the retraining command."""
    from loopscale.data.dataset import PackedDataset
    from loopscale.train.loop import _runtime, load_checkpoint_model, validation_loss
    from loopscale.train.plan import plan_run

    stored = run / TEST_TIME_FILE
    if stored.is_file() and not force:
        return read_record(stored, TestTimeRun, "delete it to evaluate the run again")
    result = read_json(run / "result.json", "rerun the run")
    if result.get("status") != "ok" or result.get("val_loss") is None:
        raise UserError(f"{run}: not a finished run (status {result.get('status')!r}); nothing to evaluate")
    found = weights_folder(run, weights_from)
    threads = int(result["config"].get("threads") or 1)
    if found is None:
        hint = RETRAIN_HINT.format(run=run, into=weights_from or "RETRAINED", name=run.name, threads=threads)
        raise UserError(f"{run}: no weights to evaluate (weights are never published); retrain it: {hint}")
    folder, source = found
    retrained_loss = None
    if source == "retrained":
        retrained = read_json(folder / "result.json", "retrain it again")
        if retrained.get("config", {}).get("model") != result["config"]["model"]:
            raise UserError(f"{folder}: retrained with another model config than {run}; retrain it again")
        retrained_loss = float(retrained["val_loss"])
    model, cfg = load_checkpoint_model(folder)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # the run's own thread count: fp32 sums depend on it
    try:
        ds = PackedDataset(cfg.data.path)
        plan = plan_run(cfg, ds)
        rt = _runtime(cfg)
        loops = eval_loop_counts(cfg.model.r)
        losses = tuple(validation_loss(model, ds, plan, rt, r=t) for t in loops)
    finally:
        torch.set_num_threads(previous)
    evaluated = TestTimeRun(
        schema=TEST_TIME_SCHEMA,
        run=run.name,
        train_r=cfg.model.r,
        test_r=loops,
        val_loss=losses,
        val_tokens=plan.val_tokens,
        threads=threads,
        weights=source,
        published_val_loss=float(result["val_loss"]),
        retrained_val_loss=retrained_loss,
    )
    atomic_write_json(stored, evaluated.to_dict())
    return evaluated
