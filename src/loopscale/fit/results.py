"""Typed analysis results: frozen dataclasses holding numbers and codes, never sentences (issue 42).

Modelled on SciPy's ``BootstrapResult`` / ``ConfidenceInterval``: ``fit/`` computes and returns these, the
presentation layer (``loopscale.present``) writes every sentence about them, and the report renders what
they hold. Each type derives from :class:`Record`:

- ``to_dict()`` gives JSON-ready data (tuples become lists, nested records dicts);
- ``from_dict(data)`` rebuilds the record from that data, checking every value against the field's type
  and refusing unknown or missing keys, so a misspelt or newer field is an error, not silently dropped.

Invariants a result must keep are checked in ``__post_init__``: a law check whose lack of fit has p below
``LACK_OF_FIT_CAUTION`` cannot carry the verdict "holds".
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from loopscale.errors import UserError

SCHEMA_VERSION = 1  # of every document built from these records (fit.json's law_check, analysis.json)
LACK_OF_FIT_CAUTION = 0.01  # a lack of fit below this p passes the family level but is never "holds"
MIN_BUDGETS = 3  # a law check needs this many budgets to test that one φ holds across them


class RecordError(ValueError):
    """Data that does not make the record asked for: the message names the key path."""


class Record:
    """Base of every result type (a frozen dataclass): strict ``to_dict`` / ``from_dict``."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _encode(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None):
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise RecordError(f"{where}: expected a mapping for {cls.__name__}, got {type(data).__name__}")
        hints = _hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise RecordError(f"{where}: unknown key(s) {', '.join(unknown)} for {cls.__name__}")
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                values[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{where}: missing key {f.name!r} for {cls.__name__}")
        try:
            return cls(**values)
        except ValueError as exc:  # an invariant of __post_init__
            raise RecordError(f"{where}: {exc}") from exc


@functools.cache
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(tp: Any, value: Any, where: str) -> Any:
    if tp is Any:  # a JSON value kept as it is (settings echoed back)
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _decode(option, value, where)
            except RecordError as exc:
                errors.append(str(exc))
        raise RecordError(errors[0] if len(errors) == 1 else f"{where}: {value!r} matches none of {tp}")
    if origin is Literal:
        if value not in args:
            raise RecordError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise RecordError(f"{where}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise RecordError(f"{where}: expected {len(args)} values, got {len(value)}")
        return tuple(_decode(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected a mapping, got {type(value).__name__}")
        return {str(k): _decode(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Record):
        return value if isinstance(value, tp) else tp.from_dict(value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RecordError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecordError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise RecordError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise TypeError(f"{where}: no decoder for type {tp!r}")  # a programming error in a record's fields


class SparseRecord(Record):
    """A record whose ``OPTIONAL`` fields are left out of ``to_dict`` while None: fit.json holds those keys
    only where they apply (``from_dict`` reads their absence as None)."""

    OPTIONAL: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().to_dict().items() if not (k in self.OPTIONAL and v is None)}


# ---------------------------------------------------------------------------------------------------------
# Intervals and tests


@dataclass(frozen=True)
class ConfidenceInterval(Record):
    """[low, high] at ``level`` (0.95 = 95%); an end is None where the method leaves it open."""

    low: float | None
    high: float | None
    level: float
    method: str  # "percentile bootstrap", "chi2", …

    @classmethod
    def of(cls, pair, level: float, method: str) -> ConfidenceInterval | None:
        """From a [low, high] pair (None stays None)."""
        return None if pair is None else cls(pair[0], pair[1], level, method)

    def holds(self, value: float) -> bool:
        lo = -float("inf") if self.low is None else self.low
        hi = float("inf") if self.high is None else self.high
        return lo <= value <= hi


# ---------------------------------------------------------------------------------------------------------
# The law check (fit.lawcheck)

# The Monte Carlo range of each end of a percentile CI (``fit.bootstrap.end_ranges``); None: beyond the draws
EndRanges = tuple[tuple[float | None, float | None], tuple[float | None, float | None]]
NoiseSource = Literal["replicates", "--noise", "none"]
LawVerdict = Literal["holds", "not rejected", "rejected", "inconclusive", "untestable"]


@dataclass(frozen=True)
class RunNoise(Record):
    """The run-to-run noise the law check tests against (nats): replicate seeds, a stated figure, or none."""

    sigma: float | None
    df: int | None
    ci: tuple[float, float] | None
    source: NoiseSource
    ss: float | None = None  # pure-error sum of squares (replicates)
    replicated_runs: int | None = None
    stated: float | None = None  # a --noise figure given beside replicates (which win)


@dataclass(frozen=True)
class LackOfFit(Record):
    """Residuals against the noise: F against the replicates' pure error, or χ² against a stated noise."""

    test: Literal["F", "chi2"]
    statistic: float
    df: tuple[int, ...]
    p: float
    source: NoiseSource
    rmse: float  # nats
    sigma: float  # nats


@dataclass(frozen=True)
class HeldOutBudget(Record):
    """One budget left out, predicted by the law fitted on the others (errors observed − predicted, nats);
    ``failed`` where the refit could not be made (then only budget and n)."""

    budget: float  # FLOPs
    n: int
    rmse: float | None = None
    bias: float | None = None
    max_abs: float | None = None
    F: float | None = None  # Chow's predictive F; None without residual variance
    df: tuple[int, int] | None = None
    p: float | None = None
    rmse_over_noise: float | None = None
    bias_over_noise: float | None = None
    failed: bool = False


@dataclass(frozen=True)
class LawExtension(Record):
    """A one-parameter extension of the law (``law.EXTENSIONS``) against the paper's form."""

    form: str  # "phi-trend-c", "phi-trend-n", "e-per-r"
    label: str
    covariate: str
    estimate: float
    ci: tuple[float, float] | None
    phi0: float
    lr: float
    F: float | None
    df: tuple[int, int]
    p: float | None
    aic: float
    rmse: float  # nats
    at_bound: tuple[str, ...]
    ext_ref: float | None
    nats_per_doubling: float | None = None  # e-per-r: the floor's change per doubling of r
    phi0_ci: tuple[float, float] | None = None
    lobo_rmse: float | None = None  # pooled leave-one-budget-out RMSE (only when the law is rejected)
    leave_one_budget_out: tuple[HeldOutBudget, ...] | None = None


@dataclass(frozen=True)
class BudgetPhi(Record):
    """φ at one budget with E, α, β held at the pooled fit; None where the budget has fewer than 2 loop
    counts or 4 runs."""

    budget: float
    phi: float | None
    ci: tuple[float, float] | None
    n: int
    ci_mc: EndRanges | None = None


@dataclass(frozen=True)
class HalfPhi(Record):
    """φ of the lower or upper half of the budgets (the whole law refitted)."""

    half: str  # "lower", "upper"
    budgets: tuple[float, ...]
    phi: float | None
    ci: tuple[float, float] | None
    n: int
    ci_mc: EndRanges | None = None


@dataclass(frozen=True)
class TrendPower(Record):
    """Predicted power of the φ-trend test at ``level`` against φ drifting ``drift_per_decade``; ``value`` is
    None with a ``why`` code when there is none."""

    test: str
    drift_per_decade: float
    level: float
    value: float | None
    why: Literal["no_df", "no_noise", "not_separable"] | None = None
    sigma: float | None = None


@dataclass(frozen=True)
class Evidence(Record):
    """One test of the law check that could be computed: which (kind and key) and its p-value."""

    kind: Literal["lack_of_fit", "extension", "held_out_budget"]
    p: float
    key: str | None = None  # the extension's form
    budget: float | None = None  # the held-out budget


@dataclass(frozen=True)
class LawCheck(Record):
    """Does the paper's law describe the runs (``fit.lawcheck.check_law``)? See that module for the tests.

    ``evidence``: every test computed, strongest (lowest p) first; ``rejected_by``: those below
    ``threshold`` (Bonferroni over the ``tests``); ``untestable``: why nothing was tested."""

    verdict: LawVerdict
    family_level: float
    noise: RunNoise
    rmse: float  # nats
    lack_of_fit: LackOfFit | None
    leave_one_budget_out: tuple[HeldOutBudget, ...]
    extensions: tuple[LawExtension, ...]
    per_budget_phi: tuple[BudgetPhi, ...]
    halves: tuple[HalfPhi, ...]
    decomposition: dict[str, float]  # share of the residual sum of squares each grouping's means explain
    selected_form: str
    budgets: int | None  # budgets in the table (None: a document written before it was recorded)
    evidence: tuple[Evidence, ...] = ()
    rejected_by: tuple[Evidence, ...] = ()
    tests: int = 0
    threshold: float | None = None
    paper_lobo_rmse: float | None = None
    power: TrendPower | None = None
    untestable: Literal["too_few_budgets", "no_residual"] | None = None
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        lof = None if self.lack_of_fit is None else self.lack_of_fit.p
        if self.verdict == "holds" and lof is not None and lof < LACK_OF_FIT_CAUTION:
            raise ValueError(
                f"a law check whose lack of fit has p = {lof:.2g} < {LACK_OF_FIT_CAUTION} cannot hold"
            )
        if self.verdict == "rejected" and not self.rejected_by:
            raise ValueError("a rejected law check names the tests that reject it")

    @property
    def phi_drift(self) -> tuple[float, ...]:
        """φ per budget where it was fitted, in budget order."""
        return tuple(row.phi for row in self.per_budget_phi if row.phi is not None)


def law_evidence(lof: LackOfFit | None, extensions, lobo) -> tuple[Evidence, ...]:
    """Every test that could be computed (lack of fit, each extension, each held-out budget), lowest p
    first (ties keep that order)."""
    tests = [] if lof is None else [Evidence("lack_of_fit", lof.p)]
    tests += [Evidence("extension", ext.p, key=ext.form) for ext in extensions if ext.p is not None]
    tests += [Evidence("held_out_budget", row.p, budget=row.budget) for row in lobo if row.p is not None]
    return tuple(sorted(tests, key=lambda e: e.p))


_LEGACY_WHY = {  # the sentences a law check written before fit.results kept in power.why → their codes
    "no degree of freedom": "no_df",
    "no run-to-run noise": "no_noise",
    "these runs cannot tell": "not_separable",
}


def read_law_check(data: dict) -> LawCheck:
    """A law check from JSON (fit.json's or compare.json's ``law_check``): the current schema as it is, a
    document written before ``fit.results`` (no "schema" key) converted: its sentences (headline, reasons,
    notes, errors) dropped, the evidence and the tests that reject recomputed from its p-values. Raises
    ``fit.results.RecordError`` naming the key that does not fit."""
    if "schema" in data:
        return LawCheck.from_dict(data)
    doc = {k: v for k, v in data.items() if k not in ("headline", "reasons")}

    def held_out(rows):
        return None if rows is None else [
            {**{k: v for k, v in row.items() if k != "error"}, **({"failed": True} if "error" in row else {})}
            for row in rows
        ]  # fmt: skip

    doc["leave_one_budget_out"] = held_out(doc.get("leave_one_budget_out", []))
    doc["extensions"] = [
        {**ext, "leave_one_budget_out": held_out(ext.get("leave_one_budget_out"))}
        for ext in doc["extensions"]
    ]
    doc["per_budget_phi"] = [{k: v for k, v in row.items() if k != "note"} for row in doc["per_budget_phi"]]
    doc["halves"] = [{"half": name, **row} for name, row in (doc.get("halves") or {}).items()]
    if doc.get("power") and doc["power"].get("why"):
        why = doc["power"]["why"]
        doc["power"] = {**doc["power"], "why": next(c for s, c in _LEGACY_WHY.items() if why.startswith(s))}
    doc["budgets"] = len(doc["leave_one_budget_out"]) or None
    check = LawCheck.from_dict({**doc, "verdict": "untestable", "schema": SCHEMA_VERSION})  # typed parts
    evidence = law_evidence(check.lack_of_fit, check.extensions, check.leave_one_budget_out)
    threshold = check.threshold
    rejected_by = tuple(e for e in evidence if threshold is not None and e.p < threshold)
    untestable = None if evidence else ("no_residual" if check.leave_one_budget_out else "too_few_budgets")
    return dataclasses.replace(
        check, verdict=data["verdict"], evidence=evidence, rejected_by=rejected_by, untestable=untestable
    )


def law_check_in(doc: dict, where: str) -> LawCheck | None:
    """The law check of a fit.json document (its ``law_check``; None when it has none). A value that does
    not make one is a one-line UserError naming ``where`` and the key."""
    data = doc.get("law_check")
    if not data:
        return None
    try:
        return read_law_check(data)
    except (RecordError, KeyError, StopIteration) as exc:
        raise UserError(f"{where}: law_check is not a law check loopscale can read ({exc})") from exc
