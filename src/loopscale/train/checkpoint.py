"""Checkpoints of a training run: safetensors weights + optimiser state, data position and RNG state.

Layout inside a run folder::

    checkpoints/latest                 # the name of the newest complete checkpoint (atomic text file)
    checkpoints/step_00000120/
        model.safetensors              # model weights (fp32)
        optimizer.safetensors          # every optimiser state tensor, keyed "<optimiser>.<param>.<name>"
        state.json                     # step, next data row, depth draws used, param-group settings,
                                       # scalar state, RNG, config

A checkpoint is written into a hidden temporary folder (each file atomically), renamed into place, and
only then named in ``latest``; a kill -9 at any moment leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from loopscale.errors import UserError
from loopscale.io import atomic_write, atomic_write_json, atomic_write_text

CHECKPOINT_DIR = "checkpoints"
WEIGHTS = "model.safetensors"
OPTIMIZER = "optimizer.safetensors"
STATE = "state.json"


def save_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Write ``tensors`` (moved to CPU, contiguous) as one safetensors file, atomically."""
    cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    atomic_write(path, lambda tmp: save_file(cpu, tmp))


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Read a safetensors file; a missing or corrupt file is a UserError."""
    if not path.is_file():
        raise UserError(f"checkpoint file missing: {path}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise UserError(
            f"checkpoint file {path} is corrupt ({str(exc).splitlines()[0]}); delete the run folder "
            "or its checkpoints/ to start over"
        ) from None


def optimizer_state(optimizers: list[torch.optim.Optimizer]) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Split the optimisers' state dicts into tensors (for safetensors) and JSON-able settings/scalars."""
    tensors: dict[str, torch.Tensor] = {}
    meta = []
    for i, opt in enumerate(optimizers):
        sd = opt.state_dict()
        scalars: dict[str, dict[str, Any]] = {}
        for pid, entries in sd["state"].items():
            for name, value in entries.items():
                if isinstance(value, torch.Tensor):
                    tensors[f"{i}.{pid}.{name}"] = value
                else:
                    scalars.setdefault(str(pid), {})[name] = value
        meta.append({"type": type(opt).__name__, "param_groups": sd["param_groups"], "scalars": scalars})
    return tensors, meta


def load_optimizer_state(
    optimizers: list[torch.optim.Optimizer], tensors: dict[str, torch.Tensor], meta: list[dict], where: Path
) -> None:
    """Inverse of ``optimizer_state``; a different optimiser layout is a UserError."""
    if [m["type"] for m in meta] != [type(o).__name__ for o in optimizers]:
        raise UserError(
            f"checkpoint {where} holds optimisers {[m['type'] for m in meta]}, this run builds "
            f"{[type(o).__name__ for o in optimizers]}; the config does not match the checkpoint"
        )
    for i, (opt, m) in enumerate(zip(optimizers, meta)):
        state: dict[int, dict[str, Any]] = {}
        for key, value in tensors.items():
            opt_index, pid, name = key.split(".", 2)
            if int(opt_index) == i:
                state.setdefault(int(pid), {})[name] = value
        for pid, entries in m["scalars"].items():
            state.setdefault(int(pid), {}).update(entries)
        groups = m["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in opt.param_groups]:
            raise UserError(f"checkpoint {where}: optimiser parameter groups do not match this model")
        params = [p for g in opt.param_groups for p in g["params"]]
        for pid, entries in state.items():
            for name, value in entries.items():
                if pid >= len(params) or (
                    isinstance(value, torch.Tensor) and value.ndim and value.shape != params[pid].shape
                ):
                    raise UserError(
                        f"checkpoint {where}: optimiser state {name} of parameter {pid} does not "
                        "fit this model; the config does not match the checkpoint"
                    )
        opt.load_state_dict({"state": state, "param_groups": groups})


def rng_state() -> dict[str, torch.Tensor]:
    """Torch CPU (and CUDA) generator states as uint8 tensors."""
    out = {"rng.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.cuda{i}"] = s
    return out


def set_rng_state(tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["rng.cpu"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda"))]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    optimizers: list[torch.optim.Optimizer],
    state: dict[str, Any],
) -> Path:
    """Write checkpoint ``step`` (weights, optimiser, ``state``, RNG), make it latest, prune older ones."""
    root = Path(run_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:08d}"
    tmp = root / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_tensors(tmp / WEIGHTS, model.state_dict())
    opt_tensors, opt_meta = optimizer_state(optimizers)
    save_tensors(tmp / OPTIMIZER, {**opt_tensors, **rng_state()})
    atomic_write_json(tmp / STATE, {**state, "step": step, "optimizers": opt_meta})
    final = root / name
    shutil.rmtree(final, ignore_errors=True)  # a stale folder from a run killed before updating `latest`
    os.replace(tmp, final)
    _fsync_dir(root)
    atomic_write_text(root / "latest", name + "\n")
    for old in root.iterdir():
        if old.is_dir() and old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint folder of ``run_dir`` (None when there is none)."""
    pointer = Path(run_dir) / CHECKPOINT_DIR / "latest"
    if not pointer.is_file():
        return None
    folder = pointer.parent / pointer.read_text().strip()
    if not folder.is_dir():
        raise UserError(
            f"{pointer} names {folder.name}, which is missing; delete {pointer.parent} to start over"
        )
    return folder


def read_state(folder: Path) -> dict[str, Any]:
    """state.json of a checkpoint folder (UserError when missing or corrupt)."""
    path = folder / STATE
    try:
        state = json.loads(path.read_text())
        int(state["step"])
        return state
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"checkpoint state {path} is missing or corrupt ({exc.__class__.__name__}); delete "
            f"{folder.parent} to start over"
        ) from None


def load_weights(model: torch.nn.Module, path: Path) -> None:
    """Load safetensors weights into ``model``; missing/extra keys or other shapes are a UserError."""
    tensors = load_tensors(path)
    own = model.state_dict()
    missing, extra = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
    wrong = [k for k in own if k in tensors and tensors[k].shape != own[k].shape]
    if missing or extra or wrong:
        detail = (
            f"missing {missing[:3]}"
            if missing
            else f"unexpected {extra[:3]}"
            if extra
            else f"{wrong[0]} is {tuple(tensors[wrong[0]].shape)}, the model has {tuple(own[wrong[0]].shape)}"
        )
        raise UserError(f"weights {path} do not match the model config ({detail})")
    model.load_state_dict(tensors)


def load_checkpoint(
    folder: Path, model: torch.nn.Module, optimizers: list[torch.optim.Optimizer]
) -> dict[str, Any]:
    """Restore weights, optimiser state and RNG from ``folder``; returns its state.json contents."""
    state = read_state(folder)
    load_weights(model, folder / WEIGHTS)
    tensors = load_tensors(folder / OPTIMIZER)
    rng = {k: v for k, v in tensors.items() if k.startswith("rng.")}
    if "rng.cpu" not in rng:
        raise UserError(f"checkpoint {folder} has no RNG state; it is corrupt")
    # torch's load_state_dict moves state tensors to their parameter's device (the "step" counts stay put)
    opt_tensors = {k: v for k, v in tensors.items() if not k.startswith("rng.")}
    load_optimizer_state(optimizers, opt_tensors, state["optimizers"], folder)
    set_rng_state(rng)
    return state


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
