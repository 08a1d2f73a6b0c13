"""Validating designs by simulation: noisy tables drawn from the prior, each fitted with ``fit_law`` and its
cell block bootstrap (``bootstrap_fit``), reporting the realised median CI widths and the coverage of the
prior's φ beside the prediction.

The asymptotics ignore the box, the cell bootstrap's few-cells behaviour and the nonlinearity of the law, so a
design is only trusted once simulated: with a target CI width a bracketing/bisection search along the Pareto
front (``bracket_search``) finds the cheapest design that reaches it in simulation (``simulate_in_loop``).
"""

from __future__ import annotations

import numpy as np

from loopscale.design.candidates import Candidates
from loopscale.design.predict import Information
from loopscale.design.prior import Prior
from loopscale.design.results import AGREEMENT, Agreement, Realisation, SimulationRound
from loopscale.design.search import PathPoint, RunDesign, bracket_search, choose, pareto, within_cap
from loopscale.errors import UserError
from loopscale.fit.bootstrap import bootstrap_fit
from loopscale.fit.fitter import fit_law
from loopscale.fit.law import PARAMS, PHI, at_bound
from loopscale.progress import progress_bar

REPORTED = ("phi", "alpha", "beta", "E")  # the CI widths a design reports


def simulate(
    cands: Candidates,
    info: Information,
    prior: Prior,
    design: RunDesign,
    k: int,
    *,
    seed: int = 0,
    restarts: int = 40,
    bootstrap: int = 100,
    bootstrap_restarts: int = 3,
) -> Realisation:
    """Draw ``k`` noisy results tables of ``design`` from the prior (Gaussian noise of σ nats on each final
    loss, seeds ``seed``…``seed + k − 1``) and fit each with ``fit_law`` and ``bootstrap_fit`` (the
    parameters ``info.held`` held at the prior's values): the fit's own point estimate and 95% percentile
    CIs. ``restarts``/``bootstrap``/``bootstrap_restarts`` trade precision
    of each fit for time (``loopscale fit`` uses 500/200/20). One progress bar per design, a unit per fit."""
    if k < 1:
        raise UserError(f"--simulate needs at least 1 draw, got {k}")
    idx = np.repeat(design.idx, design.replicates)
    held = {PARAMS[i]: float(info.theta[i]) for i in info.held}  # design --hold: fitted as fit --fix would
    rows, phi_bound = [], []
    with progress_bar(k, f"simulate {design.label or 'design'}", "fit") as advance:
        for j in range(k):
            rng = np.random.default_rng(seed + j)
            loss = info.loss[idx] + prior.sigma * rng.standard_normal(len(idx))
            table = cands.table(design.idx, loss, design.replicates)
            fit = fit_law(table, restarts=restarts, seed=seed + j, held=held)
            boot = bootstrap_fit(fit, table, resamples=bootstrap, restarts=bootstrap_restarts, seed=seed + j)
            ci = boot.ci
            lo, hi = ci["phi"]
            phis = boot.samples["phi"]
            thetas = np.zeros((len(phis), len(PARAMS)))
            thetas[:, PHI] = phis
            phi_bound.append(at_bound(thetas)[:, PHI])
            rows.append(
                {
                    "seed": seed + j,
                    "phi": fit.phi,
                    "ci_phi": [lo, hi],
                    "covered": bool(lo <= prior.phi <= hi),
                    # a held parameter has no CI: width 0, as predicted
                    **{f"width_{n}": ci[n][1] - ci[n][0] if n in ci else 0.0 for n in REPORTED},
                }
            )
            advance(1)
    return Realisation(
        k=k,
        ci_width={name: float(np.median([row[f"width_{name}"] for row in rows])) for name in REPORTED},
        coverage=float(np.mean([row["covered"] for row in rows])),
        phi_median=float(np.median([row["phi"] for row in rows])),
        phi_at_bound=float(np.mean(np.concatenate(phi_bound))),
        per_seed=tuple(rows),
        settings={"restarts": restarts, "bootstrap": bootstrap, "bootstrap_restarts": bootstrap_restarts},
    )


def simulate_in_loop(
    cands: Candidates,
    info: Information,
    prior: Prior,
    paths: list[list[PathPoint]],
    k: int,
    *,
    target_ci: float | None = None,
    flop_cap: float | None = None,
    cost_cap: float | None = None,
    rounds: int = 6,
    **settings,
) -> tuple[PathPoint, Realisation, list[SimulationRound]]:
    """Choose a design with the simulation in the loop, because the asymptotics flatter sparse designs.

    Target CI width: the cheapest design whose *realised* width ≤ ``target_ci``, searched on one Pareto
    front (cost vs predicted φ CI width) per replicate count, because replicates shrink the predicted width
    (they double every run's information) but not the cell bootstrap's, which resamples the same number of
    cells: on a front that mixes them, replicated designs shadow unreplicated ones that realise narrower at
    the same cost. On each front, fewest replicates first and cut to the designs cheaper than the best hit so
    far, ``bracket_search`` simulates at most ``rounds`` designs: first the cheapest predicted to reach the
    target (or, if none is, the narrowest predicted); each bracketing move re-aims at the cheapest predicted
    to reach target × predicted/realised of the design just simulated; then bisection in cost. When no
    simulated design reaches the target, the narrowest realised is returned. FLOP cap (or ``cost_cap``, on
    ``PathPoint.cost``): simulate the narrowest-predicted design under the cap of each path (at most
    ``rounds``, narrowest first) and keep the narrowest realised. Returns (chosen point, its realisation,
    one log row per simulated design, in the order simulated). ``settings`` go to ``simulate``; every
    design is simulated with the same seeds."""
    log: list[SimulationRound] = []

    realised: dict[int, tuple[PathPoint, Realisation]] = {}  # id(point) -> every simulated design

    def run(point: PathPoint, target: float | None = None) -> Realisation:
        real = simulate(cands, info, prior, point.design, k, **settings)
        realised[id(point)] = (point, real)
        log.append(
            SimulationRound(
                design=point.design.label,
                idx=tuple(point.design.idx.tolist()),
                replicates=point.design.replicates,
                runs=int(len(point.design.idx) * point.design.replicates),
                flops=point.flops,
                cost=point.cost,
                predicted=point.predicted,
                realised=real,
                reaches_target=None if target is None else bool(real.ci_width["phi"] <= target),
            )
        )
        return real

    if flop_cap is not None or cost_cap is not None:
        options = [
            min(
                (p for p in path if within_cap(p, flop_cap, cost_cap)),
                key=lambda p: p.predicted["phi"],
                default=None,
            )
            for path in paths
        ]
        options = sorted(
            {id(p): p for p in options if p is not None}.values(), key=lambda p: p.predicted["phi"]
        )
        if not options:  # choose raises the one-line error
            choose(pareto([p for path in paths for p in path]), None, flop_cap, cost_cap)
        results = [(p, run(p)) for p in options[: max(1, rounds)]]
        chosen, real = min(results, key=lambda item: item[1].ci_width["phi"])
        return chosen, real, log
    best: PathPoint | None = None
    for replicates in sorted({p.design.replicates for path in paths for p in path}):
        family = pareto([p for path in paths for p in path if p.design.replicates == replicates])
        family = [p for p in family if best is None or p.cost < best.cost]
        if family:
            best = _bracket_front(family, target_ci, lambda p: run(p, target_ci), rounds) or best
    if best is None:
        best = min(realised.values(), key=lambda item: item[1].ci_width["phi"])[0]
    return best, realised[id(best)][1], log


def _bracket_front(front: list[PathPoint], target_ci: float, run, rounds: int) -> PathPoint | None:
    """``bracket_search`` on one front for the cheapest design realising ``target_ci`` (None: none did)."""
    sims: dict[int, Realisation] = {}
    # the cheapest predicted to reach the target; else the narrowest predicted (simulation may beat it)
    seed = next((i for i, p in enumerate(front) if p.predicted["phi"] <= target_ci), len(front) - 1)

    def passes(i: int) -> bool:
        sims[i] = run(front[i])
        return sims[i].ci_width["phi"] <= target_ci

    def aim(i: int) -> int:
        aimed = target_ci * front[i].predicted["phi"] / sims[i].ci_width["phi"]
        return next((j for j, p in enumerate(front) if p.predicted["phi"] <= aimed), len(front) - 1)

    costs = [p.cost for p in front]
    found, _ = bracket_search(len(front), seed, passes, aim, max(1, rounds), position=costs)
    return None if found is None else front[found]


def agreement(predicted: float, realised: float) -> Agreement | None:
    """On which side the realised CI width lies outside ±``AGREEMENT`` of the prediction (None: inside)."""
    ratio = realised / predicted
    if abs(ratio - 1) <= AGREEMENT:
        return None
    return "wider" if ratio > 1 else "narrower"
