"""Typed results of "is φ identified?" (``fit.profile``, ``fit.diagnostics``): numbers and codes only, the
parts of fit.json's ``profile`` and ``diagnostics``. Their sentences are written by
``loopscale.present.identification``; ``fit.protocol.read_protocol`` converts fit.json files written before
these records, which held the sentences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loopscale.fit.results import Record, SparseRecord

End = Literal["lower", "upper"]


@dataclass(frozen=True)
class IntervalDisagreement(Record):
    """How φ's profile interval and bootstrap CI disagree (``fit.profile.compare_intervals``).

    ``open_end``: ``open_one`` is open at ``ends[0]`` (it reaches the box edge) where the other is closed;
    ``ends_differ``: closed ends differ at ``ends`` by more than a quarter of the wider interval's width.
    ``bootstrap`` and ``profile`` are the two intervals at ``level`` (a profile end None: open)."""

    kind: Literal["open_end", "ends_differ"]
    ends: tuple[End, ...]
    bootstrap: tuple[float, float]
    profile: tuple[float | None, float | None]
    level: float
    open_one: Literal["profile", "bootstrap"] | None = None


@dataclass(frozen=True)
class ProfileResult(Record):
    """The profile-likelihood interval for φ (``fit.profile.profile_phi``): the grid ``phi``, the
    least-squares ``objective`` (½·RSS of log loss) and ``deviance`` at each point, the χ²₁ ``threshold`` at
    ``level``, the ``interval`` (an end None: ``open``), the least-squares ``phi_hat`` and ``rss_min``, and
    whether it agrees with the bootstrap CI (None: no CI to compare; ``disagreement`` says how not)."""

    phi: tuple[float, ...]
    objective: tuple[float, ...]
    deviance: tuple[float, ...]
    threshold: float
    level: float
    interval: tuple[float | None, float | None]
    open: tuple[bool, bool]
    phi_hat: float
    rss_min: float
    n_runs: int
    disjoint: bool
    agrees_with_bootstrap: bool | None
    disagreement: IntervalDisagreement | None


# ---------------------------------------------------------------------------------------------------------
# fit.diagnostics

Side = Literal["lower", "upper"]
IdentificationVerdict = Literal["plain", "not_identified", "identified_given_shape", "identified"]


@dataclass(frozen=True)
class BoundsFound(Record):
    """Parameters (labels: "E", "alpha", "phi", …) on an edge of the fit box: of the main fit, of each
    joint form, and the share of bootstrap refits with each free parameter there."""

    point: tuple[str, ...]
    forms: dict[str, tuple[str, ...]]
    bootstrap_share: dict[str, float]


@dataclass(frozen=True)
class IdentificationChecks(SparseRecord):
    """The identification checks made (``fit.diagnostics``); a check not made is None (left out)."""

    OPTIONAL = (
        "phi_at_bound",
        "profile_open",
        "bootstrap_ci_at_bound",
        "bootstrap_phi_at_bound_share",
        "interval_spans_0_and_1",
    )

    phi_at_bound: bool | None = None
    profile_open: bool | None = None
    bootstrap_ci_at_bound: bool | None = None
    bootstrap_phi_at_bound_share: float | None = None
    interval_spans_0_and_1: bool | None = None
    shape_at_bound: tuple[str, ...] = ()


@dataclass(frozen=True)
class PhiFlag(SparseRecord):
    """One reason φ is not identified, with the numbers its sentence quotes (``present.fit_text``):

    ``phi_at_bound``: the joint fit's ``phi`` on its ``side`` bound; ``profile_open``: the profile
    ``interval`` is ``open`` (deviance under ``threshold`` to the edge); ``bootstrap_ci_at_bound``: the
    bootstrap CI ``interval`` at ``level`` touches the box; ``bootstrap_share``: ``refits`` of ``resamples``
    (``share``) put φ at a bound; ``spans_0_and_1``: the ``source`` interval holds both φ = 0 and φ = 1."""

    OPTIONAL = (
        "interval",
        "phi",
        "side",
        "open",
        "threshold",
        "level",
        "refits",
        "resamples",
        "share",
        "source",
    )

    kind: Literal["phi_at_bound", "profile_open", "bootstrap_ci_at_bound", "bootstrap_share", "spans_0_and_1"]
    interval: tuple[float | None, float | None] | None = None
    phi: float | None = None
    side: Side | None = None
    open: tuple[bool, bool] | None = None
    threshold: float | None = None
    level: float | None = None
    refits: int | None = None
    resamples: int | None = None
    share: float | None = None
    source: Literal["bootstrap", "profile"] | None = None


@dataclass(frozen=True)
class ParamAtBound(Record):
    """A parameter of the main fit other than φ on an edge of the fit box: its label and which edge."""

    name: str
    side: Side


@dataclass(frozen=True)
class FormRanking(Record):
    """Two forms that R² and the minimised objective rank in opposite orders: ``worse`` has the worse
    (higher) objective but the higher R²."""

    worse: str
    better: str
    r2_worse: float
    r2_better: float
    objective_worse: float
    objective_better: float


@dataclass(frozen=True)
class Diagnostics(Record):
    """Is φ identified (``fit.diagnostics.diagnose``)? ``verdict`` is the code of the report's sentence
    (``present.fit_text.identification_verdict``), the other fields the numbers it and the reasons quote:

    ``phi_flags``: why φ is not identified, in the order checked; ``bounds``: the main fit's other
    parameters on an edge; ``phi``: the joint fit's φ (None: the plain law); ``fixed_phi``: the main fit's φ
    where it fixes one; ``bootstrap_ci`` at ``bootstrap_level`` and ``profile_interval``: the intervals the
    verdict quotes; ``intervals_disagree``: they disagree; ``held``: labels of the parameters held fixed;
    ``ranking``: a pair of forms R² ranks against the objective (None: none)."""

    at_bound: BoundsFound
    phi_identified: bool | None
    checks: IdentificationChecks
    verdict: IdentificationVerdict
    phi_flags: tuple[PhiFlag, ...]
    bounds: tuple[ParamAtBound, ...]
    n_runs: int
    phi: float | None
    fixed_phi: float | None
    bootstrap_ci: tuple[float, float] | None
    bootstrap_level: float | None
    profile_interval: tuple[float | None, float | None] | None
    intervals_disagree: bool
    held: tuple[str, ...]
    ranking: FormRanking | None

    @property
    def shape(self) -> tuple[str, ...]:
        """The shape parameters (E, α, β) on an edge: φ is then conditional on where the box was drawn."""
        return self.checks.shape_at_bound
