"""The design step as one call: a reference grid (or a partial sweep) and what was asked for → the design
document (``make_design``): prior, candidate space, search paths, optional simulation, Δφ power table and the
emitted sweep spec. ``loopscale design`` maps its flags onto ``DesignSettings`` and prints the document."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from loopscale.config import dump_yaml
from loopscale.design.candidates import (
    Candidates,
    candidates_from_spec,
    partial_sweep_candidates,
    pick_group,
)
from loopscale.design.delta_phi import cheapest_with_power, power_table, simulate_power_in_loop
from loopscale.design.document import design_spec, extension_spec, summary_row
from loopscale.design.predict import Information
from loopscale.design.prior import Prior, load_prior, prior_from_table
from loopscale.design.results import (
    CandidateSpace,
    DesignConstraints,
    DesignDocument,
    DesignPower,
    DesignTarget,
    ParetoPoint,
    PowerRound,
    PowerSearch,
    SimulationRound,
)
from loopscale.design.search import (
    Constraints,
    PathPoint,
    RunDesign,
    check_design,
    choose,
    greedy_path,
    pareto,
    pruning_path,
)
from loopscale.design.simulation import Realisation, simulate, simulate_in_loop
from loopscale.errors import UserError
from loopscale.fit.law import PARAMS
from loopscale.fit.priors import LABEL_TO_THETA
from loopscale.fit.table import load_table
from loopscale.sweep.collect import collect_rows
from loopscale.sweep.plan import PlannedRun, WallEstimate, default_layout, plan_sweep
from loopscale.sweep.spec import SweepSpec

WallRow = TypeVar("WallRow", SimulationRound, PowerRound)  # a simulated design's log row
TARGETS = ("target_ci", "flop_cap", "flop_fraction", "wall_cap", "wall_fraction")
HOLDABLE = ("E", "A", "B", "alpha", "beta")  # φ is what a design measures: never held


@dataclass(frozen=True)
class DesignSettings:
    """What the design step is asked for, one field per ``loopscale design`` flag (same names and units:
    budgets and caps in training FLOPs, ``wall_cap`` in seconds, ``sigma`` and ``target_ci`` of φ as in
    the flags' help)."""

    group: str | None = None
    prior: str = "paper"
    sigma: float | None = None
    budgets: list[float] | None = None
    rs: list[int] | None = None
    widths: list[int] | None = None
    replicates: list[int] = field(default_factory=lambda: [1])
    min_widths: int = 3
    per_budget: str = "ends"
    max_budget_ratio: float | None = None
    cost: str = "flops"
    target_ci: float | None = None
    flop_cap: float | None = None
    flop_fraction: float | None = None
    wall_cap: float | None = None
    wall_fraction: float | None = None
    simulate: int = 0
    sim_restarts: int = 40
    sim_bootstrap: int = 100
    sim_bootstrap_restarts: int = 3
    sim_rounds: int = 6
    reference_sim: bool = True
    delta_phi: float = 0.1
    target_power: float = 0.8
    simulate_power: int = 0
    hold: list[str] | None = None  # E, A, B, alpha, beta: held at the prior's values in every fit
    seed: int = 0
    workers: int | None = None

    def validate(self) -> None:
        """One line (UserError) for the first setting out of range, before anything is loaded."""
        if sum(getattr(self, name) is not None for name in TARGETS) > 1:
            raise UserError(
                "give one target: --target-ci, --flop-cap, --flop-fraction, --wall-cap or --wall-fraction"
            )
        if (self.wall_cap is not None or self.wall_fraction is not None) and self.cost != "wall":
            raise UserError("--wall-cap / --wall-fraction cap the estimated wall time: add --cost wall")
        for name in (*TARGETS, "sigma", "delta_phi"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise UserError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
        bad_budgets = [b for b in self.budgets or [] if not (math.isfinite(b) and b > 0)]
        if bad_budgets:
            raise UserError(f"--budgets must be positive numbers of training FLOPs, got {bad_budgets[0]}")
        if self.max_budget_ratio is not None and not self.max_budget_ratio > 1:
            raise UserError(f"--max-budget-ratio must be > 1, got {self.max_budget_ratio}")
        if self.min_widths < 3:
            raise UserError(
                f"--min-widths must be >= 3 (a parabola needs three widths), got {self.min_widths}"
            )
        if (
            any(k < 1 for k in self.replicates)
            or min(self.workers or 1, self.sim_rounds) < 1
            or self.simulate < 0
        ):
            raise UserError("--replicates, --workers and --sim-rounds must be >= 1 and --simulate >= 0")
        if not 0 < self.target_power < 1:
            raise UserError(f"--target-power must lie in (0, 1), got {self.target_power}")
        unknown = sorted(set(self.hold or []) - set(HOLDABLE))
        if unknown:
            raise UserError(f"--hold: cannot hold {unknown[0]!r}; use any of {', '.join(HOLDABLE)}")
        if self.hold and self.simulate_power:
            raise UserError("--simulate-power fits both arms with every parameter free: drop --hold")

    @property
    def held(self) -> tuple[int, ...]:
        """θ indices (``law.PARAMS``) of the parameters ``--hold`` names."""
        return tuple(sorted(PARAMS.index(LABEL_TO_THETA[name]) for name in set(self.hold or [])))

    @property
    def restrict(self) -> dict:
        """The candidate space as given (None: the reference's own) and whether β is held."""
        return {
            "budgets": self.budgets,
            "rs": self.rs,
            "widths": self.widths,
            "beta_held": "beta" in (self.hold or []),
        }

    @property
    def constraints(self) -> Constraints:
        return Constraints(self.min_widths, self.per_budget, self.max_budget_ratio)

    @property
    def simulation_settings(self) -> dict:
        """Keyword arguments of ``simulate`` / ``simulate_power``: seeds and the effort of each fit."""
        return {
            "seed": self.seed,
            "restarts": self.sim_restarts,
            "bootstrap": self.sim_bootstrap,
            "bootstrap_restarts": self.sim_bootstrap_restarts,
        }


@dataclass(frozen=True)
class PartialSweep:
    """Sequential mode: a sweep folder whose finished runs the design refits and extends."""

    folder: Path
    spec: SweepSpec


@dataclass(frozen=True)
class WallModel:
    """How wall time is estimated on this machine: ``estimate(runs, workers)`` gives a ``WallEstimate``
    (the planner's throughput probe, or a finished sweep's measured run times), or None where none can be
    made (no probe, or the narrowest model too large to probe here); ``source`` says what it rests on."""

    estimate: Callable[[list[PlannedRun], int], WallEstimate | None]
    source: str


def make_design(
    settings: DesignSettings,
    reference: SweepSpec,
    ref_label: str,
    *,
    partial: PartialSweep | None = None,
    wall: WallModel | None = None,
) -> DesignDocument:
    """The design document of ``loopscale design`` (``present.design_text.format_design`` prints it;
    ``doc.spec`` is the emitted sweep spec as YAML). Each simulated design shows a progress bar of its
    fits."""
    settings.validate()
    if partial is None:
        prior = load_prior(settings.prior, settings.sigma, seed=settings.seed)
        cands = candidates_from_spec(reference, group=settings.group, **settings.restrict)
        ref_cands = candidates_from_spec(reference, group=settings.group)
    else:
        prior, cands = _partial(settings, reference, partial)
        ref_cands = cands
    shares, ref_shares = None, None
    if wall is not None:
        shares, ref_shares = _wall_shares(wall, settings, reference, partial, cands, ref_cands)
    if settings.cost == "wall":
        if shares is None:
            raise UserError(
                "--cost wall: no wall-time estimate on this machine (the narrowest model is too large to "
                "probe here); use --cost flops"
            )
        cands = cands.with_cost(shares)
        ref_cands = cands if partial is not None else ref_cands.with_cost(ref_shares)
    info = Information.build(prior, cands, settings.held)
    ref_info = Information.build(prior, ref_cands, settings.held) if ref_cands is not cands else info
    ref_design = (
        RunDesign(np.arange(len(ref_cands.runs)), len(reference.seeds), f"reference ({ref_label})")
        if partial is None
        else RunDesign(np.flatnonzero(cands.fixed), 1, f"the sweep so far ({ref_label})")
    )
    # the reference counts every run it holds (a partial sweep's fixed runs too): not RunDesign.cost
    ref_flops = float((ref_cands.flops[ref_design.idx]).sum() * ref_design.replicates)
    ref_cost = float(ref_cands.run_cost[ref_design.idx].sum() * ref_design.replicates)
    ref_point = PathPoint(
        ref_design,
        ref_flops,
        ref_info.ci_widths(ref_design.weights(len(ref_cands.runs))),
        "reference",
        ref_cost,
    )
    constraints = settings.constraints
    paths = [
        search(cands, info, constraints, replicates=k)
        for k in settings.replicates
        for search in (greedy_path, pruning_path)
    ]
    front = pareto([p for path in paths for p in path])
    target_ci, cap, wall_cap = settings.target_ci, settings.flop_cap, settings.wall_cap
    if settings.flop_fraction is not None:
        cap = settings.flop_fraction * ref_flops
    if settings.wall_fraction is not None:
        wall_cap = settings.wall_fraction * ref_cost  # --cost wall: the reference's estimated wall seconds
    sims: dict[str, Realisation] = {}
    rounds: list[SimulationRound] = []
    sim_kw = settings.simulation_settings
    if settings.simulate and settings.reference_sim:
        sims["reference"] = simulate(ref_cands, ref_info, prior, ref_design, settings.simulate, **sim_kw)
    target_source = "given"
    if target_ci is None and cap is None and wall_cap is None:
        if partial is not None:
            raise UserError(
                "--from needs a target: --target-ci, --flop-cap, --flop-fraction, --wall-cap or "
                "--wall-fraction (of the sweep)"
            )
        # the reference's own precision: realised on the same seeds when simulated, else predicted
        if "reference" in sims:
            target_ci, target_source = sims["reference"].ci_width["phi"], "the reference's realised width"
        else:
            target_ci, target_source = ref_point.predicted["phi"], "the reference's predicted width"
    if settings.simulate:
        chosen, sims["design"], rounds = simulate_in_loop(
            cands,
            info,
            prior,
            paths,
            settings.simulate,
            target_ci=target_ci,
            flop_cap=cap,
            cost_cap=wall_cap,
            rounds=settings.sim_rounds,
            **sim_kw,
        )
    else:
        chosen = choose(front, target_ci, cap, wall_cap)
    problems = check_design(cands, info, chosen.design, constraints)
    # the reference under the default r rule and the design's widths and budget ratio
    ref_rules = Constraints(settings.min_widths, max_budget_ratio=settings.max_budget_ratio)
    ref_problems = check_design(ref_cands, ref_info, ref_design, ref_rules)
    if partial is None:
        out_spec = design_spec(cands, chosen.design, f"{reference.name}-design")
    else:
        out_spec = extension_spec(cands, chosen.design)
    seconds = {}
    if shares is not None:
        seconds = {
            "design": chosen.design.cost(cands, shares),
            "reference": float(ref_shares[ref_design.idx].sum() * ref_design.replicates),
        }
        rounds = _attach_wall(rounds, cands, shares)
    inflation = 1.0
    if "design" in sims:
        inflation = max(1.0, sims["design"].ci_width["phi"] / chosen.predicted["phi"])
    step = max(1, len(front) // 8)
    power = [] if partial is not None else power_table(ref_cands, ref_info, [ref_point], settings.delta_phi)
    power += power_table(cands, info, [*front[::step], chosen], settings.delta_phi, inflation)
    reaching = cheapest_with_power(
        cands, info, front, settings.delta_phi, target=settings.target_power, inflation=inflation
    )
    if reaching is not None:
        label = f"cheapest with power >= {settings.target_power:g}"
        power += power_table(cands, info, [reaching], settings.delta_phi, inflation, label=label)
    realised_power = None
    if settings.simulate_power:
        found, sim_power, power_log = simulate_power_in_loop(
            cands,
            info,
            prior,
            [p for path in paths for p in path],
            settings.delta_phi,
            settings.simulate_power,
            target=settings.target_power,
            rounds=settings.sim_rounds,
            **sim_kw,
        )
        if shares is not None:
            power_log = _attach_wall(power_log, cands, shares)
        realised_power = PowerSearch(
            target_power=settings.target_power,
            k=settings.simulate_power,
            design=None if found is None else found.design.label,
            power=None if sim_power is None else sim_power.power,
            median_ci_width=None if sim_power is None else sim_power.median_ci_width,
            flops=None if found is None else found.flops,
            candidates=tuple(power_log),
        )
    restrict = settings.restrict
    return DesignDocument(
        prior=prior.to_dict(),
        held=tuple(sorted(set(settings.hold or []))),
        reference=ref_label,
        # the candidate space as given (None: the reference's own), which the run indices point into
        candidate_space=CandidateSpace(
            group=settings.group,
            budgets=_tuple(restrict["budgets"]),
            rs=_tuple(restrict["rs"]),
            widths=_tuple(restrict["widths"]),
            beta_held=restrict["beta_held"],
        ),
        constraints=DesignConstraints(**dataclasses.asdict(constraints), problems=tuple(problems)),
        reference_constraint_problems=tuple(ref_problems),
        target=DesignTarget(ci_phi=target_ci, flop_cap=cap, wall_cap_seconds=wall_cap, source=target_source),
        cost=settings.cost,
        wall_source=wall.source if shares is not None else None,
        design=summary_row(chosen, cands, seconds.get("design"), sims.get("design"), new_only=True),
        reference_grid=summary_row(
            ref_point, ref_cands, seconds.get("reference"), sims.get("reference"), new_only=False
        ),
        simulation_rounds=tuple(rounds),
        pareto=tuple(
            ParetoPoint(
                design=p.design.label,
                flops=p.flops,
                cost=p.cost,
                replicates=p.design.replicates,
                runs=int(len(p.design.idx)),
                predicted=p.predicted,
                step=p.step,
            )
            for p in front
        ),
        power=DesignPower(
            delta_phi=settings.delta_phi,
            optimism_factor=inflation,
            rows=tuple(power),
            simulated=realised_power,
        ),
        spec=dump_yaml(out_spec),
    )


def _tuple(values: list | None) -> tuple | None:
    return None if values is None else tuple(values)


def _partial(
    settings: DesignSettings, reference: SweepSpec, partial: PartialSweep
) -> tuple[Prior, Candidates]:
    """Sequential mode: the prior refitted on the sweep's finished runs and the extension candidates."""
    rows = collect_rows(partial.folder)
    failed = {row["run"] for row in rows if row["status"] == "failed"}
    finished = [row for row in rows if row["status"] == "ok"]
    if not finished:
        raise UserError(
            f"{partial.folder}: no finished runs to refit yet; design the sweep from a prior instead"
        )
    if settings.prior != "paper":
        prior = load_prior(settings.prior, settings.sigma, seed=settings.seed)
    else:
        prior = prior_from_table(
            load_table(finished),
            settings.sigma,
            f"joint fit of the {len(finished)} finished runs in {partial.folder}",
            seed=settings.seed,
        )
    restrict = settings.restrict
    if reference is partial.spec and not restrict["widths"]:
        # the sweep's own grid is planned already: offer every width it uses at every budget
        group = pick_group(partial.spec, settings.group)
        restrict = {**restrict, "widths": sorted({w for cell in group.grid for w in cell.widths})}
    extra = candidates_from_spec(reference, group=settings.group, **restrict)
    return prior, partial_sweep_candidates(partial.spec, failed, extra)


def _attach_wall(rows: list[WallRow], cands: Candidates, shares: np.ndarray) -> list[WallRow]:
    """Each simulated design's log row with its estimated wall seconds (``est_seconds``)."""
    return [
        dataclasses.replace(
            row, est_seconds=RunDesign(np.array(row.idx, int), row.replicates).cost(cands, shares)
        )
        for row in rows
    ]


def _wall_shares(
    wall: WallModel,
    settings: DesignSettings,
    reference: SweepSpec,
    partial: PartialSweep | None,
    cands: Candidates,
    ref_cands: Candidates,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Each candidate's and each reference run's share of the estimated wall time on this machine
    (``WallEstimate.wall_shares``: a run's seconds over the workers ``loopscale sweep`` would use), or
    (None, None) when ``wall`` can make no estimate here."""
    ref_runs = plan_sweep(reference if partial is None else partial.spec)
    workers = settings.workers or default_layout(reference, ref_runs).workers
    estimate = wall.estimate(ref_cands.runs + cands.runs, workers)
    if estimate is None:
        return None, None
    return np.array(estimate.wall_shares(cands.runs)), np.array(estimate.wall_shares(ref_cands.runs))
