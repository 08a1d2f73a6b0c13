"""A recipe is a change of the run's config: a name and a list of ``key=value`` overrides (docs/recipes.md).

Keys are paths into the run's ``TrainConfig`` (``model.injection``, ``optim.matrix_lr``, ``loop_curriculum``)
plus ``bptt``, the sweep group's gradient window (full, ceil_half or k). Values are YAML scalars or flow
collections (``0.5``, ``true``, ``parcae``, ``[0.9, 0.95]``). ``price``, ``demo`` and ``design --reuse`` turn
a recipe into the sweep-group keys (``model``, ``train``, ``bptt``) of the variant runs; everything else
stays the base run's, so the pairs match. ``PRESETS`` names the built-in recipes (method §9.11 for the
paper's two; docs/model.md and docs/training.md for the three of issue 41); ``--set``, ``--variant FILE``
and plugins (``loopscale.plugins``) make others.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from loopscale.errors import UserError

if TYPE_CHECKING:
    from loopscale.config import ModelConfig

PRESETS: dict[str, tuple[str, ...]] = {
    "hyperconnections": ("model.injection=hyperconnect",),
    "truncated-bptt": ("bptt=ceil_half",),
    # the recipes priced in issue 41 (docs/model.md, docs/training.md): each a minimal swap on the template
    "parcae": ("model.injection=parcae",),
    "parcae-diag": ("model.injection=parcae-diag",),
    # Parcae with the first loop started from 0 or from Parcae's own noise instead of e (issue 51)
    "parcae-zero": ("model.injection=parcae", "model.loop_init=zero"),
    "parcae-random": ("model.injection=parcae", "model.loop_init=random"),
    "sampled-depth": ("depth_sampling=poisson-lognormal",),
    "curriculum": ("loop_curriculum=linear:0.25",),
}

# What a recipe may not change, because a pair compares the variant with the base run at one cell: the same
# cell and seed, the same tokens (data, vocabulary, context, batch) and the same held-out loss.
MATCHED = {
    "model.width": "the pair's cell",
    "model.r": "the pair's cell",
    "budget": "the pair's cell",
    "steps": "the pair's cell (steps follow from the budget)",
    "batch_tokens": "the base's batch",
    "seed": "the base run's seed",
    "compile": "the base's (compiled and eager steps round differently)",
    "model.vocab_size": "the loss is per token of the base's vocabulary",
    "model.seq_len": "the base's context length",
    "data.path": "the base's data",
    "data.val_tokens": "the base's held-out tokens",
}
# Keys a recipe sets another way.
ELSEWHERE = {"model.bptt_k": "set bptt=full, bptt=ceil_half or bptt=K (the group's gradient window)"}
# A recipe's name names its sweep, its run groups and its default folder runs/price-NAME.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,59}\Z")


@dataclass(frozen=True)
class Recipe:
    """A named change of the base run: ``overrides`` are ``key=value`` strings, applied in order."""

    name: str
    overrides: tuple[str, ...]

    def changes(self) -> dict[str, Any]:
        """The sweep-group keys of the change: ``model`` (ModelConfig keys), ``train`` (nested TrainConfig
        keys) and ``bptt``, each present only when set."""
        group: dict[str, Any] = {}
        for key, value in map(parse_override, self.overrides):
            section, _, rest = key.partition(".")
            if key == "bptt":
                group["bptt"] = str(value)
            elif section == "model":
                group.setdefault("model", {})[rest] = value
            else:
                node = group.setdefault("train", {})
                *parents, leaf = key.split(".")
                for part in parents:
                    node = node.setdefault(part, {})
                node[leaf] = value
        return group


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` → (key, the value read as YAML); a malformed one is a one-line UserError."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*", key):
        raise UserError(f"--set {text!r}: expected KEY=VALUE, a dotted config key (model.injection=parcae)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise UserError(f"--set {key}: value {raw!r} is not a YAML value") from None
    return key, value


def format_override(key: str, value: Any) -> str:
    """The ``key=value`` string that ``parse_override`` reads back as (key, value)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf).strip()
    return f"{key}={text.removesuffix('...').strip()}"


def variant_overrides(path: Path) -> tuple[str, ...]:
    """A variant file (a partial sweep group: ``model``, ``train``, ``bptt``) as overrides, in file order."""
    from loopscale.config import load_yaml

    data = load_yaml(path)
    unknown = sorted(set(data) - {"model", "train", "bptt"})
    if unknown:
        raise UserError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; a variant sets model, "
                        "train or bptt (the keys a sweep group changes)")
    out = []

    def leaves(prefix: str, node: Any) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                leaves(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            out.append(format_override(prefix, node))

    for section, node in data.items():
        if section != "bptt" and not isinstance(node, dict):
            raise UserError(f"{path}: {section} must be a mapping of keys to values, got {node!r}")
        leaves("model" if section == "model" else "bptt" if section == "bptt" else "", node)
    return tuple(out)


def resolve_recipe(
    name: str | None, *, sets: list[str] = (), variant: Path | None = None, plugin: str | None = None,
    label: str | None = None,
) -> Recipe:  # fmt: skip
    """The recipe ``price`` trains: a preset or plugin ``name`` (or ``plugin``, module:attr), then the
    ``variant`` file's changes, then each ``--set``, in that order; ``label`` names it (required when the
    changes go beyond one preset or plugin)."""
    from loopscale.plugins import installed_plugins, load_plugin, plugin_overrides

    overrides: list[str] = []
    if name is not None and name in PRESETS:
        overrides += PRESETS[name]
    elif name is not None or plugin is not None:
        if name is not None and plugin is not None:
            raise UserError(f"give a preset or plugin name ({name!r}) or --plugin, not both")
        ref = plugin or name
        if plugin is None and name not in installed_plugins():
            known = [*PRESETS, *installed_plugins()]
            raise UserError(f"unknown recipe {name!r}; choose one of {', '.join(known)}, or give --set, "
                            "--variant or --plugin MODULE:ATTR")
        overrides += plugin_overrides(ref)
        name = name or load_plugin(ref).name
    if variant is not None:
        overrides += variant_overrides(variant)
    overrides += [format_override(*parse_override(text)) for text in sets]
    if not overrides:
        raise UserError("no recipe: name a preset or plugin, or give --set KEY=VALUE, --variant or --plugin")
    if label is None:
        if name is None or variant is not None or sets:
            raise UserError("--set and --variant make a new recipe: name it with --name")
        label = name
    if not _NAME.match(label):
        raise UserError(f"recipe name {label!r} must be 1-60 letters, digits, '.' or '-' (it names folders)")
    for text in overrides:
        key = parse_override(text)[0]
        if key in MATCHED:
            raise UserError(f"{key}: a recipe may not change it (it must stay matched: {MATCHED[key]})")
        if key in ELSEWHERE:
            raise UserError(f"{key}: a recipe does not set it directly; {ELSEWHERE[key]}")
    return Recipe(label, tuple(overrides))


def recorded_recipe(settings: dict[str, Any]) -> Recipe:
    """The recipe a price.json's settings record: its name and overrides (a folder written before
    overrides were recorded names a preset, whose overrides they were)."""
    name = str(settings.get("recipe"))
    if "overrides" in settings:
        return Recipe(name, tuple(settings["overrides"]))
    if name not in PRESETS:
        raise UserError(f"price.json names recipe {name!r} without its overrides, and no preset has its name")
    return Recipe(name, PRESETS[name])


def check_recipe(recipe: Recipe, spec: dict[str, Any], cells: list[tuple[int, int]]) -> list[ModelConfig]:
    """Refuse an unknown key or a bad value, naming the key: each override applied in turn to the base's
    template and recipe (``spec``, a sweep spec mapping) at every (width, r) of ``cells`` must make a valid
    run config. Returns the variant's model config at each cell."""
    from loopscale.config import from_dict
    from loopscale.sweep.spec import RunGroup
    from loopscale.train.config import TrainConfig, merge

    configs = []
    for k, text in enumerate(recipe.overrides):
        key = parse_override(text)[0]
        changes = Recipe(recipe.name, recipe.overrides[: k + 1]).changes()
        _check_path(key)
        for width, r in cells:
            grid = [{"budget": 1.0, "widths": [width]}]
            try:
                group = from_dict(RunGroup, {"name": "recipe", "rs": [r], "grid": grid, **changes}, "recipe")
            except UserError as exc:
                raise UserError(f"{text}: {exc}") from None
            loops = {"width": width, "r": r, "bptt_k": group.bptt_k(r)}
            model = {**spec.get("model", {}), **group.model, **loops}
            data = {**merge(spec.get("train", {}), group.train), "model": model, "steps": 1,
                    "batch_tokens": spec.get("batch_tokens", 1)}
            try:
                run = from_dict(TrainConfig, data, "run")
            except UserError as exc:
                raise UserError(f"{text}: {exc} (at width {width}, r={r})") from None
            if k == len(recipe.overrides) - 1:
                configs.append(run.model)
    return configs


def _check_path(key: str) -> None:
    """An unknown key is one line naming it and the keys allowed where it is."""
    from loopscale.config import _type_hints
    from loopscale.train.config import TrainConfig

    if key == "bptt":
        return
    node: Any = TrainConfig
    parts = key.split(".")
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or "the run config"
        if not dataclasses.is_dataclass(node):
            raise UserError(f"{key}: {where} is a value, not a section of keys")
        fields = {f.name for f in dataclasses.fields(node)}
        if part not in fields:
            allowed = ", ".join(sorted(fields | ({"bptt"} if depth == 0 else set())))
            raise UserError(f"{key}: unknown key {part!r} in {where}; allowed: {allowed}")
        node = _type_hints(node)[part]
    if dataclasses.is_dataclass(node):
        raise UserError(f"{key} is a section, not a key: set its keys one by one ({key}.KEY=VALUE)")
