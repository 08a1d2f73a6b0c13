"""Typed configuration: dataclasses loaded from YAML/dicts with unknown keys rejected.

``from_dict`` is the single loader every config type goes through (model, training, sweep), so the
rules are the same everywhere: unknown keys are an error naming the key and the allowed ones, nested
dataclasses are built recursively, and ``validate()`` (when a dataclass defines it) runs at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from loopscale.errors import UserError

T = TypeVar("T")

INJECTIONS = ("auto", "linear", "additive", "none", "hyperconnect", "parcae", "parcae-diag")
PARCAE_INJECTIONS = ("parcae", "parcae-diag")  # Parcae's injection: a full d×d B, or a per-dimension B
# The state h(0) the first loop of a Parcae model starts from (ModelConfig.loop_init; loopscale.model.gpt)
LOOP_INITS = ("auto", "input", "zero", "random")
# Field metadata: to_dict leaves the field out while it holds its default, so configs written before the field
# existed (published run.yaml files, which sweep reuse compares as text) dump unchanged.
OMIT_AT_DEFAULT = "omit_at_default"


def from_dict(cls: type[T], data: dict[str, Any] | None, where: str = "config") -> T:
    """Build dataclass ``cls`` from a mapping, refusing unknown keys (with the allowed ones listed)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a mapping of keys to values, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise UserError(f"{where}: unknown key(s) {names}; allowed: {', '.join(fields)}")
    hints = _type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}")
    try:
        obj = cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise UserError(f"{where}: {exc}") from None
    if hasattr(obj, "validate"):
        obj.validate()
    return obj


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    # get_type_hints re-evaluates every string annotation on each call; task files build tens of
    # thousands of records through from_dict, where that alone took seconds
    return typing.get_type_hints(cls)


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except UserError as exc:
                errors.append(str(exc))
        raise UserError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise UserError(f"{where}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        items = [_coerce(inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise UserError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                f = float(value)
            except ValueError:
                raise UserError(f"{where}: expected an integer, got {value!r}") from None
            if f.is_integer():
                return int(f)
        raise UserError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise UserError(f"{where}: expected a number, got {value!r}")
        try:
            # YAML reads 1e18 (no dot) as a string; accept it as a number.
            f = float(value)
        except (TypeError, ValueError):
            raise UserError(f"{where}: expected a number, got {value!r}") from None
        if not math.isfinite(f):
            raise UserError(f"{where}: expected a finite number, got {value!r}")
        return f
    if tp is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise UserError(f"{where}: expected a string, got {value!r}")
    return value


def to_dict(obj: Any) -> Any:
    """Dataclass → plain dict (tuples become lists) suitable for YAML/JSON. A field added after configs were
    published (metadata ``omit_default``) is left out at its default, so a config that does not use it
    writes the text it always did (a sweep reuses a run only when its run.yaml is the same text)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not (f.metadata.get(OMIT_AT_DEFAULT) and getattr(obj, f.name) == f.default)}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a missing file or malformed YAML is a one-line UserError."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a YAML file")
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (invalid UTF-8)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UserError(f"{path}: malformed YAML{at}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level must be a mapping of keys to values")
    return data


def dump_yaml(obj: Any) -> str:
    return yaml.safe_dump(to_dict(obj), sort_keys=False)


@dataclass(frozen=True)
class Layout:
    """Concrete layer layout of a looped model: prelude → recurrent block × r → coda."""

    prelude: int
    rec_layers: int  # ℓ_rec, layers in the shared block
    coda: int
    r: int
    injection: str  # concrete mode: linear | additive | none | hyperconnect | parcae | parcae-diag

    @property
    def effective_depth(self) -> int:
        return self.prelude + self.r * self.rec_layers + self.coda

    @property
    def unique_layers(self) -> int:
        return self.prelude + self.rec_layers + self.coda


@dataclass
class ModelConfig:
    """Architecture of one looped (or plain, r = 1) transformer.

    The defaults are the paper's iso-depth template (method §2): effective depth 20, prelude = coda = 2,
    head dim 128, the authors' Llama-2 vocabulary of 32,001 padded to 32,064, T = 2048. With
    ``injection: auto`` an r = 1 model is the plain ``depth``-layer transformer (no prelude/coda,
    passthrough) and r > 1 uses linear injection; any explicit injection keeps the prelude/coda split also
    at r = 1.
    """

    width: int = 640  # d_model
    r: int = 1  # loop count used in training
    depth: int = 20  # effective depth ℓ_p + r·ℓ_rec + ℓ_c
    prelude: int = 2
    coda: int = 2
    head_dim: int = 128
    injection: str = "auto"
    hc_lanes: int = 2  # K, hyperconnection lanes
    bptt_k: int | None = None  # gradients through the last k loops; None = full BPTT (k = r)
    vocab_size: int = 32001  # true vocabulary, logits sliced to it; wte/lm_head/FLOPs use padded_vocab
    seq_len: int = 2048  # T
    softcap: float = 15.0
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # module:attr of a plugin's hook on each loop's input (loopscale.plugins); written only when set
    loop_hook: str | None = dataclasses.field(default=None, metadata={OMIT_AT_DEFAULT: True})
    # h(0) of a Parcae model: auto = the injection's own (h(0) = e, as every published run), input (the
    # same), zero, or random (Parcae's code: truncated normal, std √(2/(5d)), drawn anew in every forward)
    loop_init: str = field(default="auto", metadata={OMIT_AT_DEFAULT: True})

    def validate(self) -> None:
        if self.width <= 0 or self.head_dim <= 0:
            raise UserError(f"model: width ({self.width}) and head_dim ({self.head_dim}) must be positive")
        if self.width % self.head_dim:
            raise UserError(
                f"model: width {self.width} is not divisible by head_dim {self.head_dim}; "
                f"use a multiple of {self.head_dim}"
            )
        if self.head_dim % 2:
            raise UserError(f"model: head_dim {self.head_dim} must be even (RoPE rotates pairs)")
        if self.injection not in INJECTIONS:
            allowed = ", ".join(INJECTIONS)
            raise UserError(f"model: injection must be one of {allowed}, got {self.injection!r}")
        if self.r < 1:
            raise UserError(f"model: r must be >= 1, got {self.r}")
        if self.vocab_size < 2 or self.seq_len < 1:
            raise UserError("model: vocab_size must be >= 2 and seq_len >= 1")
        if self.hc_lanes < 1:
            raise UserError(f"model: hc_lanes must be >= 1, got {self.hc_lanes}")
        layout = self.layout()  # raises on impossible layouts
        if self.loop_init not in LOOP_INITS:
            allowed = ", ".join(LOOP_INITS)
            raise UserError(f"model: loop_init must be one of {allowed}, got {self.loop_init!r}")
        if self.loop_init != "auto" and layout.injection not in PARCAE_INJECTIONS:
            raise UserError(f"model: loop_init {self.loop_init} applies to Parcae's injection only "
                            f"({', '.join(PARCAE_INJECTIONS)}), got injection {layout.injection}")
        if layout.injection in PARCAE_INJECTIONS and layout.r < 2:
            raise UserError(f"model: injection {layout.injection} needs r >= 2 (it injects e into a loop's "
                            f"state), got r={layout.r}; use injection auto for the plain r = 1 model")
        if self.bptt_k is not None:
            if not 1 <= self.bptt_k <= layout.r:
                raise UserError(f"model: bptt_k must be in 1..r={layout.r}, got {self.bptt_k}")
            if layout.injection == "hyperconnect" and self.bptt_k != layout.r:
                raise UserError("model: truncated BPTT is not supported with hyperconnections (as in the "
                                "paper)")
        if self.loop_hook is not None:
            from loopscale.plugins import load_plugin

            if load_plugin(self.loop_hook).build_hook is None:
                raise UserError(f"model: loop_hook {self.loop_hook} names a plugin without a loop hook")

    def layout(self) -> Layout:
        """Resolve the iso-depth layout ℓ_p + r·ℓ_rec + ℓ_c = depth, refusing impossible ones."""
        injection = self.injection
        prelude, coda = self.prelude, self.coda
        if injection == "auto":
            if self.r == 1:
                injection, prelude, coda = "none", 0, 0
            else:
                injection = "linear"
        if prelude < 0 or coda < 0:
            raise UserError(f"model: prelude ({prelude}) and coda ({coda}) must be >= 0")
        rec_depth = self.depth - prelude - coda
        if rec_depth < self.r:
            raise UserError(
                f"model: depth {self.depth} minus prelude {prelude} and coda {coda} leaves {rec_depth} "
                f"recurrent layers, fewer than r={self.r}"
            )
        if rec_depth % self.r:
            raise UserError(
                f"model: r={self.r} does not divide the recurrent depth {rec_depth} "
                f"(= depth {self.depth} - prelude {prelude} - coda {coda})"
            )
        rec_layers = rec_depth // self.r
        return Layout(prelude=prelude, rec_layers=rec_layers, coda=coda, r=self.r, injection=injection)

    @property
    def n_head(self) -> int:
        return self.width // self.head_dim

    @property
    def padded_vocab(self) -> int:
        """vocab_size rounded up to a multiple of 64 (32,001 → 32,064): the rows of wte and lm_head."""
        return -(-self.vocab_size // 64) * 64

    @property
    def effective_bptt_k(self) -> int:
        return self.r if self.bptt_k is None else self.bptt_k


def replace(obj: T, **changes: Any) -> T:
    """dataclasses.replace that re-validates the result."""
    new = dataclasses.replace(obj, **changes)
    if hasattr(new, "validate"):
        new.validate()
    return new


__all__ = [
    "INJECTIONS",
    "LOOP_INITS",
    "PARCAE_INJECTIONS",
    "Layout",
    "ModelConfig",
    "dump_yaml",
    "from_dict",
    "load_yaml",
    "replace",
    "to_dict",
]
