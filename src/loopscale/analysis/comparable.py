"""Checks 1-3 of ``pairs.comparable``: are two arms' sweeps one setup apart from the recipe? Read from each
arm's sweep.yaml (the groups that ran the table's runs) or its runs' config files; keys a spec leaves out
take the defaults of ``ModelConfig`` / ``DataConfig``. Here, not in fit/, because it reads run configs (the
training package's data config); NumPy and YAML only, so the CLI runs it before SciPy loads.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

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


def arm_table(source: str | Path) -> tuple[RunTable, Path]:
    """One arm of ``compare``: a results table file, or a sweep folder (``sweep``, ``price``) whose
    results.csv is read, or, where it has none yet, its run folders as ``collect`` reads them (nothing
    written) → (the table, the folder its setup is read from)."""
    from loopscale.fit.table import load_table

    path = Path(source)
    if not path.is_dir():
        return load_table(path), path.resolve().parent
    if (path / "results.csv").is_file():
        return load_table(path / "results.csv"), path.resolve()
    if not (path / SWEEP_FILE).is_file():
        raise UserError(
            f"{path} is a folder with neither results.csv nor {SWEEP_FILE}: give a results table or a sweep "
            "folder"
        )
    from loopscale.sweep.collect import collect_rows

    return load_table(collect_rows(path)), path.resolve()


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
