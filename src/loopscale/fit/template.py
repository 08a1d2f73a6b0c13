"""The architecture template behind a results table (everything but width and r), for the frontier and
``equiv`` (method §8.7, §9.8): width → N_once, N_rec, N and FLOPs per token.

Where it comes from, in order:

1. ``--model-config PATH``: flat model keys (``depth: 10, head_dim: 8, …``), a run's ``config.yaml`` /
   ``run.yaml`` (model under ``model:``), a ``sweep.yaml`` (``model:`` plus the groups' overrides when every
   group agrees), or a folder holding one of these.
2. The sweep the table came from: ``sweep.yaml`` next to the table, else the ``runs/NAME/config.yaml`` (or
   ``run.yaml``) of the table's runs in the table's folder.
3. The paper's template (method §2).

Reads YAML with ``loopscale.config`` only (no sweep machinery, no torch).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from loopscale.config import ModelConfig, from_dict, load_yaml, to_dict
from loopscale.errors import UserError

SWEEP_FILE = "sweep.yaml"
RUN_FILES = ("config.yaml", "run.yaml")
PER_RUN_KEYS = ("width", "r", "bptt_k")  # set per run by the sweep; not part of the template
PAPER_SOURCE = "the paper's template (method §2)"


def template_from_mapping(data: dict[str, Any], where: str) -> tuple[ModelConfig, str]:
    """A template from a sweep spec, a run config or flat model keys → (ModelConfig, what it was)."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a mapping, got {type(data).__name__}")
    kind = "model keys"
    if "groups" in data:
        keys = dict(data.get("model") or {})
        overrides = [
            dict((g or {}).get("model") or {}) for g in data.get("groups") or [] if isinstance(g, dict)
        ]
        if overrides and all(o == overrides[0] for o in overrides):
            keys.update(overrides[0])
        kind = "sweep spec"
    elif isinstance(data.get("model"), dict):
        keys = dict(data["model"])
        kind = "run config"
    else:
        keys = dict(data)
    keys = {k: v for k, v in keys.items() if k not in PER_RUN_KEYS}
    head_dim = keys.get("head_dim", ModelConfig.head_dim)
    if not isinstance(head_dim, int) or head_dim <= 0:
        raise UserError(f"{where}: model head_dim must be a positive integer, got {head_dim!r}")
    cfg = from_dict(ModelConfig, {**keys, "width": 4 * head_dim}, f"{where}: model")
    return cfg, kind


def load_template(path: str | Path) -> tuple[ModelConfig, str]:
    """``--model-config``: a YAML file or a sweep / run folder → (ModelConfig, where it came from)."""
    path = Path(path)
    if path.is_dir():
        for name in (SWEEP_FILE, *RUN_FILES):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise UserError(f"{path}: no {SWEEP_FILE} or {' / '.join(RUN_FILES)} in this folder")
    cfg, kind = template_from_mapping(load_yaml(path), str(path))
    return cfg, f"{kind} {path}"


def template_for_table(table_path: str | Path, run_names) -> tuple[ModelConfig | None, str]:
    """The template of the sweep a table file came from, or (None, why not) → the caller's default."""
    folder = Path(table_path).resolve().parent
    spec = folder / SWEEP_FILE
    if spec.is_file():
        cfg, _ = template_from_mapping(load_yaml(spec), str(spec))
        return cfg, f"sweep spec {spec} (next to the table)"
    found: list[tuple[str, Path]] = []
    for name in dict.fromkeys(str(n) for n in run_names):
        for run_file in RUN_FILES:
            path = folder / "runs" / name / run_file
            if path.is_file():
                cfg, _ = template_from_mapping(load_yaml(path), str(path))
                found.append((repr(sorted(to_dict(cfg).items())), path))
                break
    if found:
        key, _ = Counter(k for k, _ in found).most_common(1)[0]
        path = next(p for k, p in found if k == key)
        cfg, _ = template_from_mapping(load_yaml(path), str(path))
        agree = sum(k == key for k, _ in found)
        return cfg, f"run config {path} ({agree} of {len(found)} run configs next to the table agree)"
    return None, f"{PAPER_SOURCE}: no {SWEEP_FILE} or run configs next to the table"


def template_mismatch(table, template: ModelConfig, split: str = "paper") -> str | None:
    """Why ``template`` cannot be the table's architecture (its N at a run's width differs), or None.

    Checks every run that has a width: the exact unique-parameter count N of the template at that width
    and r must equal the table's N_once + N_rec (relative 1e-6).
    """
    from loopscale.fit.analyses import SizeModel

    widths = np.asarray(table.width, dtype=float)
    if not np.all(np.isfinite(widths)):
        return None
    for r in sorted(set(int(v) for v in table.r)):
        try:
            sizes = SizeModel.build(template, r, split)
        except UserError as exc:
            return f"r = {r} does not fit it ({exc})"
        mask = table.r == r
        expected = sizes("n", widths[mask])
        got = np.asarray(table.n[mask], dtype=float)
        bad = np.flatnonzero(np.abs(expected - got) > 1e-6 * np.maximum(got, 1.0))
        if bad.size:
            i = np.flatnonzero(mask)[bad[0]]
            return (
                f"run {table.run[i]} (d = {widths[i]:.0f}, r = {r}) has N = {got[bad[0]]:,.0f} but the "
                f"template gives {expected[bad[0]]:,.0f}"
            )
    return None
