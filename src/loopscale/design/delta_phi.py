"""The power of a design to detect a difference Δφ between a variant and its base (``loopscale compare``):
predicted from the sandwich covariance, and simulated with ``loopscale compare``'s estimate on base/variant
pairs drawn from the prior."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from loopscale.design.candidates import Candidates
from loopscale.design.predict import Z95, Information
from loopscale.design.prior import Prior
from loopscale.design.results import PowerDraw, PowerRound, PowerRow, PowerSimulation
from loopscale.design.search import PathPoint, RunDesign, bracket_search, pareto
from loopscale.fit.law import PARAMS, PHI
from loopscale.pairs.compare import delta_phi_shared, make_arms, power
from loopscale.progress import progress_bar


def delta_phi_se(info: Information, weights: np.ndarray, shared: np.ndarray) -> float:
    """Asymptotic SE of Δφ = φ(variant) − φ(base) when both arms run the design ``weights`` under the same
    law and the runs marked ``shared`` (the r = 1 anchors) are the same runs in both fits, so their noise
    enters both estimates and cancels in part: Var Δφ = 2·Var φ − 2·Cov, Cov = [H⁻¹·V_shared·H⁻¹]_φφ."""
    cov = info.covariance(weights)
    if not np.isfinite(cov).all():
        return math.inf
    cross = info.sandwich(weights, weights * shared)[PHI, PHI]
    return float(math.sqrt(max(2 * cov[PHI, PHI] - 2 * cross, 0.0)))


def power_table(
    cands: Candidates,
    info: Information,
    points: list[PathPoint],
    delta: float = 0.1,
    inflation: float = 1.0,
    label: str | None = None,
) -> list[PowerRow]:
    """Δφ power per design: runs and FLOPs per arm (the variant arm reruns the looped runs; r = 1 runs are
    shared anchors), SE of Δφ (× ``inflation``, the realised/predicted ratio a simulation measured) and the
    power to detect ``delta``."""
    shared = (cands.r == 1).astype(float)
    rows = []
    for p in points:
        w = p.design.weights(len(cands.runs))
        se = delta_phi_se(info, w, shared) * inflation
        looped = p.design.idx[cands.r[p.design.idx] > 1]
        rows.append(
            PowerRow(
                label=label or p.design.label or p.step,
                runs_base=int(len(p.design.idx) * p.design.replicates),
                runs_variant=int(len(looped) * p.design.replicates),
                flops_base=p.flops,
                flops_variant=float(cands.flops[looped].sum() * p.design.replicates),
                se_delta_phi=se,
                power=power(delta, se),
            )
        )
    return rows


def cheapest_with_power(
    cands: Candidates,
    info: Information,
    points: list[PathPoint],
    delta: float = 0.1,
    target: float = 0.8,
    inflation: float = 1.0,
) -> PathPoint | None:
    """The cheapest design (the base arm's ``PathPoint.cost``) whose Δφ test is predicted to reach power
    ``target`` at ``delta``, or None."""
    shared = (cands.r == 1).astype(float)
    for p in sorted(points, key=lambda p: p.cost):
        se = delta_phi_se(info, p.design.weights(len(cands.runs)), shared) * inflation
        if power(delta, se) >= target:
            return p
    return None


def simulate_power(
    cands: Candidates,
    info: Information,
    prior: Prior,
    design: RunDesign,
    delta: float,
    k: int,
    *,
    seed: int = 0,
    restarts: int = 40,
    bootstrap: int = 100,
    bootstrap_restarts: int = 3,
) -> PowerSimulation:
    """Realised power of ``loopscale compare`` on ``design``: ``k`` pairs of tables, the base drawn from the
    prior and the variant from the prior with φ + ``delta`` on its looped runs, the r = 1 runs shared (the
    same losses in both); each pair goes through ``loopscale compare``'s shared-nuisance estimate and counts
    as a detection when compare calls it resolved (its 95% interval excludes 0 and its F-test rejects)."""
    idx = np.repeat(design.idx, design.replicates)
    cols = {name: values[idx] for name, values in cands.columns().items()}
    shifted = Prior(prior.theta + np.eye(len(PARAMS))[PHI] * delta, prior.sigma, prior.source)
    looped = cols["r"] > 1
    rows = []
    with progress_bar(k, f"simulate compare on {design.label or 'design'}", "pair") as advance:
        for j in range(k):
            rng = np.random.default_rng(seed + j)
            base = info.loss[idx] + prior.sigma * rng.standard_normal(len(idx))
            noise = prior.sigma * rng.standard_normal(len(idx))
            variant = np.where(looped, shifted.loss(**cols) + noise, base)
            out = delta_phi_shared(
                make_arms(
                    cands.table(design.idx, base, design.replicates),
                    cands.table(design.idx, variant, design.replicates),
                ),
                "paper",
                resamples=bootstrap,
                restarts=restarts,
                bootstrap_restarts=bootstrap_restarts,
                seed=seed + j,
            )
            rows.append(PowerDraw(seed + j, out.estimate, tuple(out.ci), out.resolved))
            advance(1)
    return PowerSimulation(
        k=k,
        delta_phi=delta,
        power=float(np.mean([row.detected for row in rows])),
        median_ci_width=float(np.median([row.ci[1] - row.ci[0] for row in rows])),
        per_seed=tuple(rows),
    )


def simulate_power_in_loop(
    cands: Candidates,
    info: Information,
    prior: Prior,
    points: list[PathPoint],
    delta: float,
    k: int,
    *,
    target: float = 0.8,
    rounds: int = 6,
    **settings,
) -> tuple[PathPoint | None, PowerSimulation | None, list[PowerRound]]:
    """The cheapest design whose *simulated* Δφ power (``simulate_power``: ``k`` base/variant pairs through
    ``loopscale compare``) ≥ ``target``, by ``bracket_search`` with at most ``rounds`` simulated designs.

    The candidates are the designs of ``points`` on the Pareto front of cost (``PathPoint.cost``, the base
    arm's) vs asymptotic SE of Δφ (``delta_phi_se``), so the predicted power rises along it; the asymptotic
    power only orders and seeds the search: the first design simulated is the cheapest predicted to reach
    ``target``, and each bracketing move re-aims at the cheapest predicted to reach it with the SE inflated
    by the factor the last simulation measured (its power read back through ``power``, clamped to
    [½/k, 1 − ½/k]). Returns (the cheapest design that reached ``target`` in simulation, or None; its
    simulated power; one log row per simulated design, in order). ``settings`` go to ``simulate_power``."""
    shared = (cands.r == 1).astype(float)
    se = {id(p): delta_phi_se(info, p.design.weights(len(cands.runs)), shared) for p in points}
    front = pareto(points, score=lambda p: se[id(p)])
    log: list[PowerRound] = []
    sims: dict[int, PowerSimulation] = {}

    def first_reaching(inflation: float) -> int:
        return next(
            (j for j, p in enumerate(front) if power(delta, se[id(p)] * inflation) >= target), len(front) - 1
        )

    def passes(i: int) -> bool:
        point = front[i]
        sims[i] = simulate_power(cands, info, prior, point.design, delta, k, **settings)
        (row,) = power_table(cands, info, [point], delta)  # runs and FLOPs per arm, SE, predicted power
        log.append(
            PowerRound(
                runs_base=row.runs_base,
                runs_variant=row.runs_variant,
                flops_base=row.flops_base,
                flops_variant=row.flops_variant,
                se_delta_phi=row.se_delta_phi,
                design=point.design.label,
                idx=tuple(point.design.idx.tolist()),
                replicates=point.design.replicates,
                flops=point.flops,
                cost=point.cost,
                predicted_power=row.power,
                simulated=sims[i].summary,
                reaches_target=bool(sims[i].power >= target),
            )
        )
        return sims[i].power >= target

    def aim(i: int) -> int:
        realised = min(max(sims[i].power, 0.5 / k), 1 - 0.5 / k)
        denominator = Z95 + float(norm.ppf(realised))  # power ≈ Φ(Δ/SE − z): the SE the simulation implies
        if denominator <= 0:
            return len(front) - 1
        return first_reaching(delta / denominator / se[id(front[i])])

    if not front:
        return None, None, log
    costs = [p.cost for p in front]
    found, _ = bracket_search(len(front), first_reaching(1.0), passes, aim, max(1, rounds), position=costs)
    if found is None:
        return None, None, log
    return front[found], sims[found], log
