"""Held parameters and priors for small tables (``loopscale fit --fix`` / ``--prior``).

A ladder table (one size ladder per loop count, tokens ∝ N) cannot determine α, β and E on its own; given
them, it can still measure φ. ``--fix NAME=V[,NAME=V]`` holds any of E, A, B, alpha, beta, phi at V (E, A, B
in natural units; the fit works with their logs, so the log must lie in the box of ``law.LOWER``/``UPPER``).
``--prior paper`` holds α, β, E at the published joint fit (``loopscale.paper.JOINT_FIT``), which carries
no interval for them: they are held exactly. ``--prior FIT.json`` holds them at a ``loopscale fit --json``
document's ``fit.alpha``, ``fit.beta``, ``fit.E``, and every bootstrap refit holds them at row i of that
document's joint bootstrap samples (``bootstrap.samples``), so the prior's uncertainty, correlations
included, reaches φ's interval.

This module loads NumPy only (the CLI checks ``--fix`` and ``--prior`` before SciPy loads).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loopscale.errors import UserError
from loopscale.fit.law import LOWER, PARAMS, UPPER
from loopscale.fit.results import Record, RecordError
from loopscale.fit.table import RunTable

#: How ``--fix`` names the parameters (as reports do) → their θ names (``law.PARAMS``).
LABEL_TO_THETA = {"E": "e", "A": "a", "B": "b", "alpha": "alpha", "beta": "beta", "phi": "phi"}
LOG_LABELS = ("E", "A", "B")  # given in natural units, fitted as logs
PRIOR_LABELS = ("alpha", "beta", "E")  # what --prior holds
PAPER_NOTE = (
    "the published law (loopscale.paper.JOINT_FIT) carries no interval for alpha, beta, E: they are held "
    "exactly, and phi's interval does not include their uncertainty"
)
NO_LAW_CHECK = (
    "no law check: it refits E, A, B, alpha and beta freely, which this table cannot support "
    "with parameters held (--fix/--prior)"
)
MIN_RUNS = 6


def to_theta(label: str, value: float, source: str) -> float:
    """A held value in natural units → its θ value (log for E, A, B); outside the fit box: UserError."""
    i = PARAMS.index(LABEL_TO_THETA[label])
    if not math.isfinite(value):
        raise UserError(f"{source}: {label} must be a finite number, got {value}")
    if label in LOG_LABELS:
        if value <= 0:
            raise UserError(f"{source}: {label} must be positive (fitted as log {label}), got {value:g}")
        box = f"[e^{LOWER[i]:g}, e^{UPPER[i]:g}] = [{math.exp(LOWER[i]):.4g}, {math.exp(UPPER[i]):.4g}]"
        theta = math.log(value)
    else:
        box, theta = f"[{LOWER[i]:g}, {UPPER[i]:g}]", value
    if not LOWER[i] <= theta <= UPPER[i]:
        raise UserError(f"{source}: {label} = {value:g} lies outside the fit box {box}")
    return theta


def parse_fix(items: list[str] | None) -> dict[str, float]:
    """``--fix`` arguments ("alpha=0.199,beta=0.369", repeatable) → {label: value in natural units}."""
    out: dict[str, float] = {}
    names = ", ".join(LABEL_TO_THETA)
    for item in items or []:
        for part in (p.strip() for p in item.split(",")):
            name, sep, text = (x.strip() for x in part.partition("="))
            if not sep or not name:
                raise UserError(f"--fix takes NAME=VALUE pairs (e.g. alpha=0.199,beta=0.369), got {part!r}")
            if name not in LABEL_TO_THETA:
                raise UserError(f"--fix: unknown parameter {name!r}; use one of: {names}")
            try:
                value = float(text)
            except ValueError:
                raise UserError(f"--fix: {name} is not a number: {text!r}") from None
            if name in out and out[name] != value:
                raise UserError(f"--fix: {name} given twice ({out[name]:g} and {value:g})")
            to_theta(name, value, "--fix")
            out[name] = value
    return out


def check_held(held: dict[str, float] | None) -> dict[str, float]:
    """{θ name: θ value} of held parameters (a, b, e, alpha, beta) checked against the box."""
    held = dict(held or {})
    for name, value in held.items():
        if name not in PARAMS[:5] or not LOWER[PARAMS.index(name)] <= value <= UPPER[PARAMS.index(name)]:
            raise UserError(f"cannot hold {name} = {value}: not one of a, b, e, alpha, beta inside the box")
    return held


@dataclass(frozen=True)
class Held:
    """Parameters held fixed: values (natural units, φ excluded), where each came from, prior draws."""

    values: dict[str, float]  # label (E, A, B, alpha, beta) → value
    sources: dict[str, str]  # label → "--fix", "paper" or the FIT.json path as given ("phi" too if fixed)
    draws: dict[str, np.ndarray] | None = None  # label → [S] joint prior samples, resampled per refit
    prior: dict | None = None  # settings.prior

    @property
    def theta(self) -> dict[str, float]:
        """{θ name: θ value} for ``fit_law(held=...)``."""
        return {LABEL_TO_THETA[k]: to_theta(k, v, self.sources[k]) for k, v in self.values.items()}

    def theta_draws(self, count: int) -> dict[str, np.ndarray] | None:
        """{θ name: [count]} the values each bootstrap refit holds: row i of the prior's joint samples
        (cycled when count exceeds them); None when nothing is resampled."""
        if not self.draws:
            return None
        rows = np.arange(count) % len(next(iter(self.draws.values())))
        return {
            LABEL_TO_THETA[k]: (np.log(v) if k in LOG_LABELS else np.asarray(v))[rows]
            for k, v in self.draws.items()
        }


@dataclass(frozen=True)
class HeldSetting(Record):
    """One held parameter: its label (E, A, B, alpha, beta, phi), value (natural units) and where it came
    from ("--fix", "paper", the FIT.json path as given, or "fix_phi")."""

    label: str
    value: float
    source: str


@dataclass(frozen=True)
class FixedSettings(Record):
    """``settings.fixed`` of fit.json and compare.json: the held parameters, in the order they were given
    (φ last). Those documents hold it keyed by label, {label: {"value", "source"}}: ``to_dict`` and
    ``from_dict`` read and write that form, so its key order is the order given."""

    held: tuple[HeldSetting, ...] = ()

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {h.label: {"value": h.value, "source": h.source} for h in self.held}

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None) -> FixedSettings:
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise RecordError(f"{where}: expected a mapping of held parameters, got {type(data).__name__}")
        rows = (HeldSetting.from_dict({"label": k, **v}, f"{where}.{k}") for k, v in data.items())
        return cls(tuple(rows))


def fixed_settings(held: Held | None, fix_phi: float | None) -> FixedSettings:
    """The parameters ``held`` holds, and φ where the form fixes it at ``fix_phi``."""
    held = held or Held({}, {})
    rows = [HeldSetting(k, v, held.sources[k]) for k, v in held.values.items()]
    if fix_phi is not None:
        rows.append(HeldSetting("phi", fix_phi, held.sources.get("phi", "fix_phi")))
    return FixedSettings(tuple(rows))


def fixed_lines(fixed: dict[str, dict], prior: dict | None) -> list[str]:
    """The text report's lines on held parameters and the prior."""
    if not fixed:
        return []
    lines = [
        "held fixed (not fitted, no CI of their own): "
        + ", ".join(f"{k} = {v['value']:.6g} ({v['source']})" for k, v in fixed.items())
    ]
    if prior is not None:
        lines.append(f"prior {prior['source']}: {prior['note']}")
    return lines


@dataclass(frozen=True)
class LoadedPrior:
    """``load_prior``: the held values {alpha, beta, E} (natural units), their joint bootstrap draws
    {label: [S]} or None (held exactly), and the prior's entry of ``settings.prior`` ({"source",
    "resampled", "note"}, "samples" where resampled), the JSON ``fit.json`` records."""

    values: dict[str, float]
    draws: dict[str, np.ndarray] | None
    doc: dict


def load_prior(spec: str) -> LoadedPrior:
    """``--prior paper`` or ``--prior FIT.json`` → the values it holds, their draws and its settings entry."""
    if spec == "paper":
        from loopscale.paper import JOINT_FIT

        values = {k: float(JOINT_FIT[k]) for k in PRIOR_LABELS}
        return LoadedPrior(values, None, {"source": "paper", "resampled": False, "note": PAPER_NOTE})
    path = Path(spec)
    try:
        doc = json.loads(path.read_text())
        fit = doc["fit"]
        values = {k: fit[k] for k in PRIOR_LABELS}
    except FileNotFoundError:
        raise UserError(f"--prior: no such file: {spec} (give 'paper' or a `fit --json` file)") from None
    except (json.JSONDecodeError, KeyError, TypeError, IsADirectoryError, UnicodeDecodeError, OSError):
        raise UserError(f"--prior {spec}: not a `fit --json` document (no fit.alpha/beta/E)") from None
    for k, v in values.items():
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise UserError(f"--prior {spec}: fit.{k} is not a number ({v!r})")
        to_theta(k, float(v), f"--prior {spec}")
    values = {k: float(v) for k, v in values.items()}
    samples = ((doc.get("bootstrap") or {}).get("samples")) or {}
    try:
        draws = {k: np.asarray(samples[k], dtype=float) for k in PRIOR_LABELS}
    except (KeyError, TypeError, ValueError):
        draws = None
    if draws is None or len({len(v) for v in draws.values()}) != 1 or len(draws["E"]) < 2:
        note = f"{spec} has no usable bootstrap samples of alpha, beta, E: they are held exactly"
        return LoadedPrior(values, None, {"source": spec, "resampled": False, "note": note})
    for k, v in draws.items():
        if v.ndim != 1 or not np.all(np.isfinite(v)) or (k == "E" and np.any(v <= 0)):
            raise UserError(f"--prior {spec}: bootstrap.samples.{k} has non-finite or invalid values")
        for x in (v.min(), v.max()):
            to_theta(k, float(x), f"--prior {spec}: bootstrap.samples")
    n = len(draws["E"])
    note = (
        f"alpha, beta, E resampled: bootstrap refit i holds them at row i of its {n} joint bootstrap "
        "samples (cycled past the last), so their uncertainty is in phi's interval"
    )
    return LoadedPrior(values, draws, {"source": spec, "resampled": True, "samples": n, "note": note})


def build_held(fix: dict[str, float], prior: str | None, phi_fixed: bool = False) -> Held | None:
    """``--fix`` (φ taken out: it is ``fix_phi``) and ``--prior`` → Held, or None when nothing is held."""
    sources = {k: "--fix" for k in fix}
    if phi_fixed:
        sources["phi"] = "--fix"
    values = {k: v for k, v in fix.items() if k != "phi"}
    draws = doc = None
    if prior is not None:
        both = [k for k in PRIOR_LABELS if k in values]
        if both:
            raise UserError(f"--fix and --prior both set {', '.join(both)}; give one of them")
        loaded = load_prior(prior)
        draws, doc = loaded.draws, loaded.doc
        values.update(loaded.values)
        sources.update({k: doc["source"] for k in loaded.values})
    if not values and not phi_fixed:
        return None
    return Held(values=values, sources=sources, draws=draws, prior=doc)


def check_identifiable(table: RunTable, form: str, fix_phi: float | None, held=()) -> None:
    """Refuse fits whose parameters the table cannot determine (one-line UserError); ``held``: θ names
    held fixed (they need no runs; a held β needs no second budget)."""
    n_free = (5 if form == "chinchilla" or fix_phi is not None else 6) - len(held)
    need = max(MIN_RUNS, n_free + 1)
    if len(table) < need:
        raise UserError(f"only {len(table)} usable run(s); the {form} law needs at least {need}")
    rs = sorted(set(table.r.tolist()))
    if form == "chinchilla" and len(rs) > 1:
        raise UserError(
            f"the plain Chinchilla law is for one architecture but the table has r = {rs}; "
            "use the joint law (it also reports per-r fits) or filter the table to one r"
        )
    if form == "joint" and fix_phi is None and (len(rs) < 2 or not np.any(table.n_rec[table.r > 1] > 0)):
        raise UserError(
            f"phi is unidentifiable: every run has r = {rs[0]}; add runs with other loop counts "
            "or fit the plain Chinchilla law (--law chinchilla)"
        )
    if "beta" in held:
        return
    if table.has_budget:
        if len(set(table.budget.tolist())) < 2:
            raise UserError(
                f"beta is unidentifiable: all runs share one budget ({table.budget[0]:.3g} FLOPs); "
                "add runs at other budgets (or hold beta: --fix beta=V, --prior)"
            )
    else:
        log_n, log_d = np.log(table.n), np.log(table.tokens)
        design = np.column_stack([np.ones(len(table)), log_n])
        resid = log_d - design @ np.linalg.lstsq(design, log_d, rcond=None)[0]
        if np.abs(resid).max() < 1e-9 * max(1.0, np.abs(log_d).max()):
            raise UserError(
                "beta is unidentifiable: tokens are a fixed power of N (all runs at one compute "
                "budget); add runs at other budgets (or hold beta: --fix beta=V, --prior)"
            )
