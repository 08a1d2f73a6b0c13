"""Helpers of the sweep tests: the tiny crash-test spec, the sweep command line, the results table."""

from __future__ import annotations

import csv
import os
import sys
import time
from pathlib import Path

HOOKS = Path(__file__).parent / "crash_hooks"
BUDGET = 1e9  # FLOPs: ~170 steps of 64 tokens at d = 16 (about a second of training)

SPEC = """
name: crash
batch_tokens: 64
model: {{depth: 4, prelude: 1, coda: 1, head_dim: 16, vocab_size: 64, seq_len: 16}}
train:
  device: cpu
  progress: false
  checkpoint_every_steps: 10
  data: {{path: {data}, val_tokens: 256}}
  optim: {{ref_width: 32, ref_batch_tokens: 64, ref_r_looped: 2}}
groups:
  - name: main
    rs: {rs}
    grid:
      - {{budget: {budget:g}, widths: {widths}}}
{extra}"""

# A recipe variant whose loss becomes non-finite within a few steps (absurd AdamW learning rates).
DIVERGING_GROUP = """  - name: diverge
    rs: [2]
    grid:
      - {{budget: {budget:g}, widths: [16]}}
    train: {{optim: {{recipe: adamw, adamw_matrix_lr: 1.0e+30, embed_lr: 1.0e+30}}}}
"""


def write_spec(
    tmp_path: Path, data: Path, *, budget: float = BUDGET, rs=(1, 2), widths=(16,), diverging: bool = False
) -> Path:
    """The tiny sweep spec (main group: ``rs`` × ``widths`` at ``budget``; optionally a diverging group)."""
    path = tmp_path / "spec.yaml"
    extra = DIVERGING_GROUP.format(budget=budget) if diverging else ""
    path.write_text(SPEC.format(data=data, budget=budget, rs=list(rs), widths=list(widths), extra=extra))
    return path


def sweep_cmd(out: Path, spec: Path | None = None) -> list[str]:
    """``loopscale sweep [SPEC] --out OUT --threads 1`` (without SPEC: resume OUT)."""
    cmd = [sys.executable, "-m", "loopscale", "sweep"]
    if spec is not None:
        cmd.append(str(spec))
    return [*cmd, "--out", str(out), "--threads", "1"]


def env_with(pause: str | None = None, markers: Path | None = None) -> dict:
    """The environment of a test sweep; ``pause`` activates a crash hook (crash_hooks/sitecustomize.py)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if pause:
        env.update(
            PYTHONPATH=os.pathsep.join([str(HOOKS), env.get("PYTHONPATH", "")]),
            LOOPSCALE_TEST_PAUSE=pause,
            LOOPSCALE_TEST_MARKERS=str(markers),
        )
    return env


def processes_of(folder: Path) -> list[int]:
    """PIDs of the live processes whose command line names ``folder`` (a sweep's driver and training
    processes, torchrun and its ranks included)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(folder).encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:  # ended meanwhile
            continue
    return pids


def wait_until_gone(folder: Path) -> None:
    """Wait until no process names ``folder`` (no time limit: a machine's speed is not under test)."""
    while processes_of(folder):
        time.sleep(0.05)


def results(out: Path) -> dict[str, tuple[str, str]]:
    """{run: (status, loss as written)} from OUT/results.csv; asserts no run appears twice."""
    with open(out / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    names = [r["run"] for r in rows]
    assert len(names) == len(set(names)), "a run appears twice"
    return {r["run"]: (r["status"], r["loss"]) for r in rows}


LAW = {"E": 1.6, "A": 28.0, "alpha": 0.2, "B": 900.0, "beta": 0.37, "phi": 0.5}


def law_loss(n_once: float, n_rec: float, r: int, tokens: float, coef: dict = LAW) -> float:
    """L = E + A·(N_once + r^φ·N_rec)^(−α) + B·D^(−β), nats (an independent copy of the law for tests)."""
    n_eff = n_once + r ** coef["phi"] * n_rec
    return coef["E"] + coef["A"] * n_eff ** -coef["alpha"] + coef["B"] * tokens ** -coef["beta"]


def report_grid(name: str):
    """The sweep spec a synthetic sweep is built from: ``"demo"`` is the 18-run grid the first `demo` preset
    ran (the laptop template at 4e11 / 8e11 / 1.6e12 FLOPs, widths 16 / 32 / 48, r ∈ {1, 8}), kept for the
    report tests because it spans budgets, widths and loop counts; today's `demo` preset (8 runs at one
    width) brackets no iso-FLOP minimum. Any other name is that preset."""
    import copy

    from loopscale.config import from_dict
    from loopscale.sweep import SweepSpec, preset
    from loopscale.sweep.presets import PRESETS

    if name != "demo":
        return preset(name)
    doc = copy.deepcopy(PRESETS["laptop"])
    doc["name"] = "demo"
    doc["train"]["data"]["val_tokens"] = 32_768
    grid = [{"budget": c, "widths": [16, 32, 48]} for c in (4e11, 8e11, 1.6e12)]
    doc["groups"] = [{"name": "main", "rs": [1, 8], "grid": grid}]
    return from_dict(SweepSpec, doc, "the report tests' grid")


def synthetic_sweep(
    root: Path,
    preset_name: str = "demo",
    failed: str | None = None,
    axes: bool = False,
    data: dict | None = None,
) -> list:
    """A finished sweep folder whose result.json losses follow LAW exactly (no training): sweep.yaml from
    ``report_grid(preset_name)``, one result.json per run; ``failed`` names a run recorded as diverged;
    ``axes`` adds an eval.json with two axis losses per run. ``data`` sets train.data (default: a dataset
    path that does not exist, so the report's baselines do not depend on what this machine has built)."""
    import dataclasses
    import json

    from loopscale.config import dump_yaml
    from loopscale.io import atomic_write_text
    from loopscale.sweep import plan_sweep

    spec = report_grid(preset_name)
    train = dict(spec.train)
    train["data"] = {**(train.get("data") or {}), **(data or {"path": str(root / "no-dataset")})}
    spec = dataclasses.replace(spec, train=train)
    atomic_write_text(root / "sweep.yaml", dump_yaml(spec))
    runs = plan_sweep(spec)
    for run in runs:
        folder = root / "runs" / run.name
        folder.mkdir(parents=True)
        loss = law_loss(run.n_once, run.n_rec, run.r, run.tokens)
        ok = run.name != failed
        result = {
            "status": "ok" if ok else "failed",
            "reason": None if ok else "non-finite loss at step 7",
            "n": run.n,
            "n_once": run.n_once,
            "n_rec": run.n_rec,
            "flops_per_token": run.flops_per_token,
            "tokens": run.tokens,
            "steps": run.steps,
            "val_loss": loss if ok else None,
            "wall_time_s": 1.0,
        }
        (folder / "result.json").write_text(json.dumps(result))
        if axes:
            (folder / "eval.json").write_text(
                json.dumps({"axes": {"knowledge": loss + 0.5, "reading": {"loss": loss - 0.2}}})
            )
    return runs
