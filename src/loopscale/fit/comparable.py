"""Are a base and a variant comparable arms of ``loopscale compare`` (method §5.3)? Refuse them when not.

Δφ measures a recipe change: the two arms must be the same experiment apart from that change. A recipe may
change how the loops are trained or joined (``injection``, ``hc_lanes``, the BPTT window, the optimiser),
so those may differ; what they are measured on and the template their sizes come from may not. Each of
these is refused with a one-line ``UserError`` (the CLI exits 2):

1. the vocabulary (``vocab_size``) or the context length (``seq_len``) differs: the losses are not on one
   scale;
2. the template differs (``depth``, ``prelude``, ``coda``, ``head_dim``): N and FLOPs of a width and r
   come from another architecture;
3. the training data or the validation tokens differ (``train.data.path``, ``data.val_tokens``);
4. the same r = 1 run — one run name at one (budget, width, seed) — in both tables with a different loss
   or token count: the arms' anchors are not the same runs (both tables need ``width`` and ``seed`` columns
   to tell). A variant r = 1 run under another name at a base r = 1 run's (budget, width, seed) is the
   variant's own plain run: it pairs with the base's (``fit.effects``), it does not clash;
5. r = 1 runs of one width with different sizes N in the two tables: another architecture.

1-3 read each arm's setup from the sweep it came from: the ``sweep.yaml`` next to its table (the groups
that ran the table's runs: a run's name starts with its group's), else the ``runs/NAME/config.yaml`` (or
``run.yaml``) of its runs (``fit.template``'s sources); keys a spec leaves out take the defaults of
``ModelConfig`` / ``DataConfig``. Where either arm has neither, 1-3 cannot be checked: a note says so.
4-5 need the tables only (``check_tables``, which ``fit.compare.make_arms`` runs on every pair).

NumPy and YAML only: the CLI runs these checks before SciPy loads and before any fitting.
"""

from __future__ import annotations

import math
import os
from dataclasses import fields
from pathlib import Path

import numpy as np

from loopscale.config import ModelConfig, load_yaml
from loopscale.errors import UserError
from loopscale.fit.table import RunTable
from loopscale.fit.template import RUN_FILES, SWEEP_FILE
from loopscale.train.config import DataConfig, merge

#: Setup keys both arms must share, with why a difference makes Δφ meaningless.
SAME_SCALE = "their losses are not on one scale"
OTHER_TEMPLATE = "N and FLOPs of a width and r come from another architecture"
MUST_MATCH = {
    "vocab_size": SAME_SCALE,
    "seq_len": SAME_SCALE,
    "depth": OTHER_TEMPLATE,
    "prelude": OTHER_TEMPLATE,
    "coda": OTHER_TEMPLATE,
    "head_dim": OTHER_TEMPLATE,
    "data.path": "they were trained on different data",
    "data.val_tokens": "their losses are measured on different validation tokens",
}
MODEL_DEFAULTS = {f.name: f.default for f in fields(ModelConfig)}
DATA_DEFAULTS = {f.name: f.default for f in fields(DataConfig)}


def _values(model: dict, data: dict) -> dict[str, object]:
    """One run's (or group's) values of the ``MUST_MATCH`` keys, defaults filled in."""
    out: dict[str, object] = {}
    for key in MUST_MATCH:
        section, _, name = key.rpartition(".")
        given, defaults = (data or {}, DATA_DEFAULTS) if section == "data" else (model or {}, MODEL_DEFAULTS)
        out[key] = given.get(name, defaults[name])
    if isinstance(out["data.path"], str):
        out["data.path"] = os.path.normpath(out["data.path"])
    return out


def arm_setup(folder: str | Path, run_names) -> tuple[list[dict], str] | None:
    """The setups (``MUST_MATCH`` values) of a table's runs and where they were read, or None when the
    table's folder holds neither a sweep spec nor run configs."""
    folder = Path(folder)
    names = {str(n) for n in run_names}
    spec = folder / SWEEP_FILE
    if spec.is_file():
        data = load_yaml(spec)
        groups = [g for g in data.get("groups") or [] if isinstance(g, dict)]
        ran = {n.split("_", 1)[0] for n in names}
        used = [g for g in groups if g.get("name") in ran] or groups
        model, train = dict(data.get("model") or {}), dict(data.get("train") or {})
        setups = [
            _values({**model, **(g.get("model") or {})}, merge(train, g.get("train") or {}).get("data"))
            for g in used
        ] or [_values(model, train.get("data"))]
        return setups, str(spec)
    setups = []
    for name in sorted(names):
        path = next((p for f in RUN_FILES if (p := folder / "runs" / name / f).is_file()), None)
        if path is not None:
            run = load_yaml(path)
            setups.append(_values(run.get("model") or {}, run.get("data") or {}))
    return (setups, f"the run configs in {folder / 'runs'}") if setups else None


def _shown(values: set) -> str:
    return " and ".join(sorted(map(str, values)))


def check_setups(
    base_folder: str | Path, variant_folder: str | Path, base: RunTable, variant: RunTable
) -> list[str]:
    """Refuse arms whose sweeps differ in a ``MUST_MATCH`` key (one-line UserError); → notes (a line when
    an arm's setup could not be read, so nothing was checked)."""
    arms = {"base": arm_setup(base_folder, base.run), "variant": arm_setup(variant_folder, variant.run)}
    missing = [name for name, setup in arms.items() if setup is None]
    if missing:
        where = " and ".join(f"the {name} table" for name in missing)
        return [
            f"the arms' vocabulary, sequence length, template and data could not be checked: no {SWEEP_FILE} "
            f"or runs/*/config.yaml next to {where}; compare only arms that differ in the recipe alone"
        ]
    (base_setups, base_source), (variant_setups, variant_source) = arms["base"], arms["variant"]
    for key, why in MUST_MATCH.items():
        got = {s[key] for s in base_setups}, {s[key] for s in variant_setups}
        if got[0] != got[1]:
            raise UserError(
                f"the arms differ in {key} (base {_shown(got[0])}, variant {_shown(got[1])}; from "
                f"{base_source} and {variant_source}): {why}, so delta phi would not measure the recipe; "
                f"compare arms with one {key}"
            )
    return []


def _r1_rows(t: RunTable) -> np.ndarray:
    return np.flatnonzero(t.r == 1)


def check_tables(base: RunTable, variant: RunTable) -> None:
    """Refuse what the two tables alone show incomparable (checks 4-5 of the module docstring)."""
    b1, v1 = _r1_rows(base), _r1_rows(variant)
    sizes: dict[float, tuple[float, str]] = {}
    for i in b1:
        if math.isfinite(base.width[i]):
            sizes.setdefault(float(base.width[i]), (float(base.n[i]), str(base.run[i])))
    for i in v1:
        if not math.isfinite(variant.width[i]) or float(variant.width[i]) not in sizes:
            continue
        n_base, run_base = sizes[float(variant.width[i])]
        if not math.isclose(float(variant.n[i]), n_base, rel_tol=1e-9):
            raise UserError(
                f"the arms' r = 1 runs of width d = {variant.width[i]:.0f} differ in size: base {run_base} "
                f"N = {n_base:,.0f}, variant {variant.run[i]} N = {variant.n[i]:,.0f}: another architecture, "
                "not a recipe change; compare arms built on one template"
            )
    runs: dict[tuple[float, float, float], int] = {}
    for i in b1:
        key = (float(base.budget[i]), float(base.width[i]), float(base.seed[i]))
        if all(math.isfinite(k) for k in key):
            runs.setdefault(key, i)
    for i in v1:
        j = runs.get((float(variant.budget[i]), float(variant.width[i]), float(variant.seed[i])))
        if j is None or str(variant.run[i]) != str(base.run[j]):  # the variant's own plain run: a pair
            continue
        differ = [
            f"{name} {v:{fmt}} vs {b:{fmt}}"
            for name, v, b, fmt in (
                ("loss", variant.loss[i], base.loss[j], ".5f"),
                ("tokens", variant.tokens[i], base.tokens[j], ",.0f"),
            )
            if not math.isclose(float(v), float(b), rel_tol=1e-9)
        ]
        if differ:
            raise UserError(
                f"the variant's r = 1 run {variant.run[i]} (C = {variant.budget[i]:.3g}, d = "
                f"{variant.width[i]:.0f}, seed {variant.seed[i]:.0f}) clashes with the base's {base.run[j]}: "
                f"{', '.join(differ)}: the arms' r = 1 anchors must be the same runs; drop or rerun it"
            )
