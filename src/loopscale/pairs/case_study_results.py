"""The case study's document (``pairs.case_study.compare_arms``, written as compare.json) as typed records.

Each field is the JSON key compare.json has held, so ``CaseStudy.to_dict()`` is the file and
``read_case_study`` reads a published one back; a document written before these records (its verdict, the
estimates' method, the per-budget refusals and the notes held as sentences) is converted there, never
rewritten. No field holds a sentence: ``loopscale.present.compare_text`` writes them. Units: Δφ and φ in
units of φ, losses and their changes in nats, budgets in FLOPs, N* in parameters.

Records only (no SciPy): the report imports this module to read the document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from loopscale.errors import UserError
from loopscale.fit.protocol_results import CellGap
from loopscale.fit.results import EndRanges, LawCheck, Record, RecordError, read_law_check
from loopscale.pairs.results import PairedEffects

Pair = tuple[float, float]
# Why Δφ has no estimate or interval at a budget (``pairs.compare.per_budget``): fewer than r = 1, base looped
# and variant runs; no more runs than free parameters; a bootstrap interval of zero width, or one that
# excludes its own estimate (resamples on a bound or a flat direction)
Refusal = Literal["missing_runs", "not_identified", "zero_width", "excludes_estimate"]
# A note on the document: no law check (parameters held, --fix/--prior); no matched-pair analysis; the
# arms' setups (vocabulary, sequence length, template, data) could not be read, so not checked
Note = Literal["no_law_check", "no_pairs", "setup_unchecked"]
Shift = Literal["wider", "narrower", "unchanged", "not bracketed"]


def deciding_end(ci_mc, estimate: float) -> tuple[Literal["lower", "upper"], Any]:
    """The CI end nearest 0 — the one that decides whether the interval holds 0 — as ("lower" | "upper",
    its Monte Carlo range [a, b] from ``ci_mc``)."""
    return ("lower", ci_mc[0]) if estimate >= 0 else ("upper", ci_mc[1])


@dataclass(frozen=True)
class FTest(Record):
    """Extra-sum-of-squares F of the parameters a fit frees (least squares on log loss, iid errors)."""

    F: float  # NaN without residual degrees of freedom
    df: tuple[int, int]
    p: float | None


@dataclass(frozen=True)
class SharedDelta(Record):
    """The shared-nuisance Δφ (``pairs.compare.delta_phi_shared``): one fit of both arms with E, A, α, B, β
    (and an extended form's parameter) shared and φ_variant = φ + Δφ; SE from a random-effects parametric
    bootstrap per arm, interval estimate ± t(``t_df``)·SE with ``t_df`` the variant's (r, width) groups − 1;
    the F-test of Δφ = 0 beside it. The bootstrap's fields are None without one (``resamples`` 0)."""

    estimate: float
    ci: Pair | None
    se: float | None
    p: float | None  # of the t test of Δφ = 0
    t_df: int | None
    F_test: FTest
    form: str  # the law form of the shared fit ("paper" or an extension)
    method: Literal["shared_nuisance"]
    theta: tuple[float, ...]  # the shared fit's θ = (a, b, e, α, β, φ[, ext], Δφ)
    phi: float  # the base's φ
    objective: float  # summed Huber loss of log-loss residuals
    at_bound: tuple[str, ...]
    n_runs: int
    ci_mc: EndRanges | None = None  # the Monte Carlo range of each end of ``ci``
    percentile_ci: Pair | None = None
    resamples: int | None = None  # drawn (doubled while the end nearest 0 is within Monte Carlo error of 0)
    resamples_requested: int | None = None
    components: dict[str, float] | None = None  # SD of each random effect (log loss)
    mc_settled: bool = True  # the end nearest 0 lies on one side of 0 over its Monte Carlo range
    resolved: bool = False  # the interval excludes 0, the F-test rejects at 5% and the end is settled

    @property
    def grown(self) -> bool:
        """Whether the bootstrap was grown past the resamples asked for to settle the end nearest 0."""
        return (self.resamples or 0) > (self.resamples_requested or 0)


@dataclass(frozen=True)
class PaperFormDelta(Record):
    """Δφ under the paper's form where the shared fit used an extension (no bootstrap)."""

    estimate: float
    F_test: FTest
    phi: float


@dataclass(frozen=True)
class SeparateDelta(Record):
    """The paper's estimate (``delta_phi_separate``): each arm fitted on its own (its looped runs
    + the r = 1 anchors); percentile intervals of a paired cell bootstrap (None without one)."""

    base_phi: float
    variant_phi: float
    estimate: float
    ci: Pair | None
    base_ci: Pair | None
    variant_ci: Pair | None
    method: Literal["separate_fits"]
    fits: dict[str, dict[str, Any]]  # arm → ``fit.fitter.LawFit.to_dict()``


@dataclass(frozen=True)
class BudgetDelta(Record):
    """Δφ at one budget (``pairs.compare.per_budget``): E, α, β of the pooled shared fit held, a run-bootstrap
    interval; ``reason`` says why Δφ (or its interval) is missing."""

    budget: float
    delta_phi: float | None
    phi: float | None
    ci: Pair | None
    n: int  # runs at the budget
    reason: Refusal | None


@dataclass(frozen=True)
class TrendDelta(Record):
    """The variant's change of a φ trend (``pairs.compare.trend_change``): Δφ₁ per unit of ``form``'s
    covariate from the shared fit with z·covariate added, and its F-test."""

    form: str  # "phi-trend-c" or "phi-trend-n"
    estimate: float
    delta_phi_at_centre: float
    F: float
    df: tuple[int, int]
    p: float | None


@dataclass(frozen=True)
class LossCell(Record):
    """Mean loss (over seeds) of one looped (budget, width, r) in each arm and the change variant − base."""

    budget: float
    width: int
    r: int
    base: float
    variant: float
    change: float


@dataclass(frozen=True)
class LossChange(Record):
    """``pairs.case_study.loss_changes``: every looped cell both arms ran, how many the variant lowers, the
    mean change overall and per r (keys: r as text)."""

    rows: tuple[LossCell, ...]
    matched: int
    lower: int
    mean: float | None
    mean_per_r: dict[str, float]


@dataclass(frozen=True)
class OptimumShift(Record):
    """The iso-FLOP optimum N* of each arm at one (budget, r > 1) and the direction the variant moves it;
    ``ratio`` (variant / base) only where both vertices and both arms' runs bracket it."""

    budget: float
    r: int
    base_n_star: float | None
    variant_n_star: float | None
    ratio: float | None
    shift: Shift


@dataclass(frozen=True)
class ArmsLoopTax(Record):
    """The loop tax of each arm (``pairs.case_study.loop_tax``)."""

    base: tuple[CellGap, ...]
    variant: tuple[CellGap, ...]


@dataclass(frozen=True)
class CaseRuns(Record):
    """The runs compared: the base arm's, the variant's looped runs, the r = 1 anchors (those identical in
    both tables), the variant's own r = 1 runs, and the budgets."""

    base: int
    variant: int
    anchors: int
    shared_anchors: int
    own_plain: int
    budgets: tuple[float, ...]


@dataclass(frozen=True)
class PaperReference(Record):
    """What the paper reports to set the estimates beside: Δφ per recipe and the base's φ."""

    effects: dict[str, float]
    base_phi: float


@dataclass(frozen=True)
class CompareSettings(Record):
    """The settings the document was computed with; ``fixed`` and ``prior`` are ``fit.priors``' echoes."""

    restarts: int
    bootstrap_restarts: int
    seed: int
    resamples: int
    form: str
    noise: float | None  # run-to-run noise (nats) stated for the law checks
    fixed: dict[str, dict[str, Any]]
    prior: dict[str, Any] | None


@dataclass(frozen=True)
class CaseStudy(Record):
    """compare.json: Δφ of a recipe change (shared fit, the paper's form, separate fits, per budget, a
    trend's change), the law check of each arm, the loss change, the optimum's shift, the loop tax, the
    matched pairs' effect models and the power of their rule to name a Δφ of each reference size
    (``power``: "+0.19" → power)."""

    name: str
    delta_phi: SharedDelta
    delta_phi_paper_form: PaperFormDelta | None
    delta_phi_separate: SeparateDelta
    per_budget: tuple[BudgetDelta, ...]
    trend: TrendDelta | None
    law_check: dict[str, LawCheck] | None
    loss_change: LossChange
    optimum_shift: tuple[OptimumShift, ...]
    loop_tax: ArmsLoopTax
    effects: PairedEffects | None
    power: dict[str, float]
    runs: CaseRuns
    paper: PaperReference
    settings: CompareSettings
    notes: tuple[Note, ...]

    @property
    def rejected_arms(self) -> tuple[str, ...]:
        """The arms whose law check rejects one constant φ."""
        return tuple(arm for arm, check in (self.law_check or {}).items() if check.verdict == "rejected")

    @property
    def estimated_budgets(self) -> tuple[BudgetDelta, ...]:
        """The budgets where Δφ was estimated."""
        return tuple(row for row in self.per_budget if row.delta_phi is not None)


# The sentences a document written before these records held → their codes (matched by a phrase in them)
_LEGACY_REASONS = {
    "needs r = 1": "missing_runs",
    "free parameters: not identified": "not_identified",
    "the bootstrap interval has zero width": "zero_width",
    "the bootstrap interval excludes": "excludes_estimate",
}
_LEGACY_METHODS = {"shared nuisance:": "shared_nuisance", "each arm fitted on its own": "separate_fits"}
_LEGACY_NOTES = {
    "no law check": "no_law_check",
    "no matched-pair analysis": "no_pairs",
    "the arms' vocabulary, sequence length, template and data could not be checked": "setup_unchecked",
}


def _code(text: str, codes: dict[str, str]) -> str:
    return next((code for phrase, code in codes.items() if phrase in text), text)


def read_case_study(data: dict) -> CaseStudy:
    """A case study from compare.json: the current form as it is; a document written before these records
    converted: its verdict dropped, the estimates' method sentences, the per-budget refusals and the notes
    turned into their codes, the trend's label dropped (the form names it), the law checks read by
    ``read_law_check``. Raises ``fit.results.RecordError`` naming the key that does not fit."""
    if not isinstance(data, dict):
        raise RecordError(f"CaseStudy: expected a mapping, got {type(data).__name__}")
    doc = {k: v for k, v in data.items() if k != "verdict"}
    for key in ("delta_phi", "delta_phi_separate"):
        estimate = {k: v for k, v in doc[key].items() if k != "samples"}
        doc[key] = {**estimate, "method": _code(estimate["method"], _LEGACY_METHODS)}
    doc["per_budget"] = [
        {"phi": None, **row, "reason": row.get("reason") and _code(row["reason"], _LEGACY_REASONS)}
        for row in doc["per_budget"]
    ]
    if doc.get("trend"):
        doc["trend"] = {k: v for k, v in doc["trend"].items() if k != "label"}
    if doc.get("law_check"):
        doc["law_check"] = {arm: read_law_check(check) for arm, check in doc["law_check"].items()}
    doc["notes"] = [_code(note, _LEGACY_NOTES) for note in doc.get("notes", [])]
    return CaseStudy.from_dict(doc)


def case_study_in(data: Any, where: str) -> CaseStudy:
    """``read_case_study`` of a compare.json document; one that does not make one is a one-line UserError
    naming ``where`` and the key."""
    try:
        return read_case_study(data)
    except (RecordError, KeyError, TypeError, StopIteration) as exc:
        raise UserError(f"{where}: not a case study loopscale can read ({exc})") from exc
