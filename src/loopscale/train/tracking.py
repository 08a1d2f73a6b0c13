"""Optional experiment tracking of a training run: ``train.tracker: none | wandb | trackio``.

One tracker run per training run. It logs every line ``metrics.jsonl`` logs (at the same step) and, at the
end, the run's scalar result (val_loss, train_loss, status, …) as the run summary; the resolved config is
the tracker run's config. Its name is ``tracker_name`` (default: the run folder's name), its group
``tracker_group`` (a sweep sets it to the sweep's name), its project ``tracker_project``.

wandb runs offline unless ``tracker_mode: online`` (or WANDB_MODE) says otherwise, and writes into the run
folder (OUT/wandb/); ``wandb sync OUT/wandb/offline-run-*`` uploads later. The run id is kept in
OUT/tracker.json, so a resumed training run continues the same tracker run. trackio is local-first (its
own SQLite store, TRACKIO_DIR) and resumes by run name. Only rank 0 tracks; the package is imported only
when selected.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from loopscale.errors import UserError

ID_FILE = "tracker.json"


def require(tracker: str):
    """Import the selected tracker's package (None for ``none``); UserError with the pip command when it is
    missing. Called before a run writes anything."""
    if tracker == "none":
        return None
    try:
        return __import__(tracker)
    except ImportError:
        extra = " (or pip install 'loopscale[tracking]')" if tracker == "wandb" else ""
        raise UserError(
            f"train.tracker {tracker} needs the {tracker} package: pip install {tracker}{extra}"
        ) from None


class Tracker:
    """No tracking (``none``, and every rank but 0)."""

    def log(self, metrics: dict[str, Any], step: int) -> None:
        pass

    def finish(self, result: dict[str, Any] | None) -> None:
        """End the tracker run: ``result`` = result.json contents, None when the run was interrupted."""


def start(cfg, run_dir: Path, run_name: str | None = None, group: str | None = None, main: bool = True):
    """The tracker of one training run (``cfg``: the resolved TrainConfig), started on rank 0 only."""
    if cfg.tracker == "none" or not main:
        return Tracker()
    from loopscale.config import to_dict

    name = cfg.tracker_name or run_name or Path(run_dir).resolve().name
    group = cfg.tracker_group or group
    config = to_dict(cfg)
    if cfg.tracker == "wandb":
        return _WandbTracker(require("wandb"), cfg, Path(run_dir), name, group, config)
    return _TrackioTracker(require("trackio"), cfg, name, group, config)


def _run_id(run_dir: Path) -> str:
    """The tracker run id of this run folder (created once, reused on resume)."""
    path = run_dir / ID_FILE
    if path.is_file():
        return json.loads(path.read_text())["id"]
    import secrets

    run_id = secrets.token_hex(4)
    from loopscale.io import atomic_write_json

    atomic_write_json(path, {"id": run_id})
    return run_id


def _history(metrics: dict[str, Any]) -> dict[str, Any]:
    """A metrics.jsonl line as tracker history: all but the step and lists (a loop-count recipe's per
    micro-batch loop counts stay in metrics.jsonl)."""
    return {k: v for k, v in metrics.items() if k != "step" and not isinstance(v, list)}


def _scalars(result: dict[str, Any]) -> dict[str, Any]:
    """The result's flat numbers and strings (config, peak_lrs and other nested parts are left out)."""
    return {
        k: v
        for k, v in result.items()
        if isinstance(v, (int, float, str, bool)) and not (isinstance(v, float) and not math.isfinite(v))
    }


class _WandbTracker(Tracker):
    def __init__(self, wandb, cfg, run_dir: Path, name: str, group: str | None, config: dict) -> None:
        mode = cfg.tracker_mode or os.environ.get("WANDB_MODE") or "offline"
        self.run = wandb.init(
            project=cfg.tracker_project,
            name=name,
            group=group,
            id=_run_id(run_dir),
            resume="allow",
            dir=str(run_dir),
            mode=mode,
            config=config,
        )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log(_history(metrics), step=step)

    def finish(self, result: dict[str, Any] | None) -> None:
        if result is not None:
            self.run.summary.update(_scalars(result))
        self.run.finish(exit_code=0 if result is not None and result["status"] == "ok" else 1)


class _TrackioTracker(Tracker):
    """trackio prints its banners on stdout; they go to stderr (stdout carries the run's result)."""

    def __init__(self, trackio, cfg, name: str, group: str | None, config: dict) -> None:
        self.trackio = trackio
        with contextlib.redirect_stdout(sys.stderr):
            self.run = trackio.init(
                project=cfg.tracker_project,
                name=name,
                group=group,
                config=config,
                resume="allow",
                embed=False,
            )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log(_history(metrics), step=step)

    def finish(self, result: dict[str, Any] | None) -> None:
        if result is not None:  # trackio has no run summary: the result is the last logged step
            final = {f"final/{k}": v for k, v in _scalars(result).items() if not isinstance(v, str)}
            self.run.log(final, step=result["steps_done"])
        with contextlib.redirect_stdout(sys.stderr):
            self.trackio.finish()  # (run.finish would leave it current: finished again at exit)
