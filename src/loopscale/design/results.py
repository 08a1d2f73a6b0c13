"""The design step's results (issue 42): frozen records of numbers and codes, ``to_dict`` giving the design
document's JSON (``loopscale design --json``) with exactly the keys it has always had.

Units: FLOPs are training FLOPs, seconds estimated wall seconds, CI widths and SEs in the parameter's own
units (E in nats), powers and coverages shares in [0, 1]. A few keys appear only where the document has
them (a realisation only where the design was simulated, ``est_seconds`` on a simulated design only where
wall time is estimated): their records leave them out of ``to_dict`` when absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from loopscale.fit.protocol_results import MinimumMiss
from loopscale.fit.results import Record


@dataclass(frozen=True)
class Realisation(Record):
    """What ``K`` simulated sweeps of a design gave: the fit's 95% bootstrap CI widths (median over seeds),
    how often the CI covered the prior's φ, and the share of bootstrap refits with φ on the box."""

    k: int
    ci_width: dict[str, float]  # median over seeds
    coverage: float  # share of seeds whose φ CI covers the prior's φ
    phi_median: float
    phi_at_bound: float  # share of bootstrap refits (all seeds) with φ at a bound
    per_seed: tuple[dict[str, Any], ...] = ()  # seed, phi, ci_phi, covered, width_<param>
    settings: dict[str, int] = field(default_factory=dict)  # restarts, bootstrap, bootstrap_restarts


class _WallSeconds(Record):
    """A simulated design's log row: ``est_seconds`` is added where wall time is estimated, absent else."""

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if out["est_seconds"] is None:
            del out["est_seconds"]
        return out


@dataclass(frozen=True)
class SimulationRound(_WallSeconds):
    """One design ``simulate_in_loop`` simulated: its runs, predicted and realised CI widths, and whether
    it reached the target CI width (None: no target, a cap)."""

    design: str
    idx: tuple[int, ...]  # candidate indices
    replicates: int
    runs: int
    flops: float
    cost: float  # the search's cost (FLOPs or estimated wall seconds)
    predicted: dict[str, float]
    realised: Realisation
    reaches_target: bool | None
    est_seconds: float | None = None


@dataclass(frozen=True)
class PowerRow(Record):
    """One row of the Δφ power table: runs and FLOPs per arm, SE of Δφ and the power to detect the Δφ."""

    label: str
    runs_base: int
    runs_variant: int
    flops_base: float
    flops_variant: float
    se_delta_phi: float
    power: float


@dataclass(frozen=True)
class PowerDraw(Record):
    """One simulated base/variant pair through ``loopscale compare``: its Δφ, 95% CI and whether compare
    called it resolved."""

    seed: int
    delta_phi: float
    ci: tuple[float, float]
    detected: bool


@dataclass(frozen=True)
class PowerSummary(Record):
    """The realised power of ``loopscale compare`` on a design: ``k`` pairs, the true Δφ, the share
    detected and the median width of Δφ's 95% CI."""

    k: int
    delta_phi: float
    power: float
    median_ci_width: float


@dataclass(frozen=True)
class PowerSimulation(PowerSummary):
    """``simulate_power``: the summary and each pair's draw."""

    per_seed: tuple[PowerDraw, ...] = ()

    @property
    def summary(self) -> PowerSummary:
        return PowerSummary(self.k, self.delta_phi, self.power, self.median_ci_width)


@dataclass(frozen=True)
class PowerRound(_WallSeconds):
    """One design ``simulate_power_in_loop`` simulated: runs and FLOPs per arm, SE and predicted power,
    the simulated power and whether it reached the target."""

    runs_base: int
    runs_variant: int
    flops_base: float
    flops_variant: float
    se_delta_phi: float
    design: str
    idx: tuple[int, ...]
    replicates: int
    flops: float
    cost: float
    predicted_power: float
    simulated: PowerSummary
    reaches_target: bool
    est_seconds: float | None = None


@dataclass(frozen=True)
class PowerSearch(Record):
    """The simulated Δφ power search of the document: the cheapest design reaching ``target_power``
    (None: none did), its simulated power and median CI width, its FLOPs, and every design simulated."""

    target_power: float
    k: int
    design: str | None
    power: float | None
    median_ci_width: float | None
    flops: float | None
    candidates: tuple[PowerRound, ...]


@dataclass(frozen=True)
class DesignPower(Record):
    """The document's Δφ power: the Δφ to detect, the SE inflation a simulation measured, the table and
    the simulated search (None: not asked for)."""

    delta_phi: float
    optimism_factor: float
    rows: tuple[PowerRow, ...]
    simulated: PowerSearch | None


AGREEMENT = 0.25  # a realised φ CI width should be within ±25% of the asymptotic prediction
# How a realised φ CI width misses the prediction (``simulation.agreement``; ``present.design_text`` words it)
Agreement = Literal["wider", "narrower"]


@dataclass(frozen=True)
class DesignRow(Record):
    """One row of the side-by-side table (``summary_row``): runs, FLOPs, estimated wall seconds, predicted
    CI widths and the (budget, r) cells; where simulated, the realisation and ``agreement`` (the side on
    which its φ CI width misses the prediction by more than ``AGREEMENT``; None: they agree)."""

    label: str
    runs: int
    replicates: int
    flops: float
    est_seconds: float | None
    predicted_ci: dict[str, float]
    cells: tuple[tuple[float, int], ...]
    realised: Realisation | None = None
    agreement: Agreement | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.realised is None:  # an unsimulated row has neither key
            del out["realised"], out["agreement"]
        return out


@dataclass(frozen=True)
class ParetoPoint(Record):
    """A design on the Pareto front of cost vs predicted φ CI width."""

    design: str
    flops: float
    cost: float
    replicates: int
    runs: int
    predicted: dict[str, float]
    step: str


@dataclass(frozen=True)
class CandidateSpace(Record):
    """The candidate space as given (None: the reference's own) and whether β is held."""

    group: str | None
    budgets: tuple[float, ...] | None
    rs: tuple[int, ...] | None
    widths: tuple[int, ...] | None
    beta_held: bool


# Which constraint a design breaks (``search.check_design``; ``present.design_text`` words it)
ConstraintCode = Literal["end_budget_missing", "budget_gap", "budget_lacks_r", "thin_cell", "not_bracketed"]


@dataclass(frozen=True)
class ConstraintProblem(Record):
    """One constraint a design breaks, as a code and its numbers (budgets in training FLOPs):

    - ``end_budget_missing``: ``budget``, an end of the candidates' range, holds no run;
    - ``budget_gap``: neighbouring included budgets ``budget`` < ``budget_hi`` are more than ``limit`` (the
      maximum budget ratio) apart;
    - ``budget_lacks_r``: ``budget`` holds no run at the loop counts ``lacking``;
    - ``thin_cell``: cell (``budget``, ``r``) has ``widths`` widths, fewer than ``limit``;
    - ``not_bracketed``: cell (``budget``, ``r``)'s predicted iso-FLOP minimum is not bracketed, for
      ``reason``."""

    code: ConstraintCode
    budget: float
    budget_hi: float | None = None
    limit: float | None = None
    r: int | None = None
    widths: int | None = None
    lacking: tuple[int, ...] = ()
    reason: MinimumMiss | None = None


# A problem of a design document written before issue 49 is its sentence, kept as it was written
Problem = ConstraintProblem | str


@dataclass(frozen=True)
class DesignConstraints(Record):
    """The constraints every design keeps (``search.Constraints``) and those the chosen design breaks."""

    min_widths: int
    per_budget: str
    max_budget_ratio: float | None
    problems: tuple[Problem, ...]


@dataclass(frozen=True)
class DesignTarget(Record):
    """What the design aimed at: a φ CI width (and where it came from), or a FLOP or wall-time cap."""

    ci_phi: float | None
    flop_cap: float | None
    wall_cap_seconds: float | None
    source: str


@dataclass(frozen=True)
class DesignDocument(Record):
    """The design document of ``loopscale design`` (``make_design``; ``present.design_text.format_design``
    prints it, ``spec``
    is the emitted sweep spec as YAML)."""

    prior: dict[str, Any]  # Prior.to_dict(): the coefficients, sigma (nats) and source
    held: tuple[str, ...]
    reference: str
    candidate_space: CandidateSpace
    constraints: DesignConstraints
    reference_constraint_problems: tuple[Problem, ...]
    target: DesignTarget
    cost: str  # "flops" or "wall"
    wall_source: str | None
    design: DesignRow
    reference_grid: DesignRow
    simulation_rounds: tuple[SimulationRound, ...]
    pareto: tuple[ParetoPoint, ...]
    power: DesignPower
    spec: str


@dataclass(frozen=True)
class PairPick(Record):
    """``paired.pick_pairs``: the chosen rows of the base table (sorted, and in the greedy order each added
    most precision per cost), SE of Δφ beyond an offset and of Δφ alone, the 95% half-width, their cost
    (seconds or FLOPs) and training FLOPs."""

    runs: tuple[int, ...]
    order: tuple[int, ...]
    se: float
    se_alone: float
    half_width: float
    cost: float
    flops: float
