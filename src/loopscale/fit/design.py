"""Choosing the runs that measure φ to a target precision for the least compute (``loopscale design``).

Given a prior law (θ = (a, b, e, α, β, φ), the parameterisation of ``fit.law``), the noise σ of a run's final
validation loss (nats, additive Gaussian) and a candidate space (budgets × widths × r of a reference sweep),
this module

1. predicts the precision any subset of runs buys: the asymptotic covariance of the project's fit, the
   summed Huber (δ = 1e-3) of log L̂ − log L minimised over θ. For an M-estimator it is the sandwich
   H⁻¹·V·H⁻¹ with H = Σᵢ E[ψ'(εᵢ)]·JᵢJᵢᵀ and V = Σᵢ E[ψ(εᵢ)²]·JᵢJᵢᵀ, where Jᵢ = ∂ log L̂ᵢ/∂θ, ψ is Huber's
   derivative (the residual clipped to ±δ) and εᵢ ≈ N(0, (σ/L̂ᵢ)²) is the residual in log space. At
   σ = 0.01 nats and L ≈ 3 the residuals are ≈ 3δ, so the fit is mostly in Huber's linear (L1-like) regime,
   which the sandwich accounts for (plain least-squares Fisher information would not);
2. searches designs that keep the fit trustworthy (every included (budget, r) cell has ≥ 3 widths whose
   predicted iso-FLOP minimum lies inside them, by the fit's own ``parabola_minima`` on the prior's
   noise-free losses; the bottom and top budget always included; at each included budget the loop counts
   the constraints require) along two paths scored by Var(φ) per unit cost (training FLOPs, or each run's
   share of the planner's wall-time estimate): a greedy one that adds cells, budgets and widths, and a
   pruning one that removes them from the largest design;
3. validates designs by simulation (``simulate``): noisy tables drawn from the prior, each fitted with
   ``fit_law`` and its cell block bootstrap (``bootstrap_fit``), reporting the realised median CI widths and
   the coverage of the prior's φ beside the prediction. The asymptotics ignore the box, the cell bootstrap's
   few-cells behaviour and the nonlinearity of the law, so a design is only trusted once simulated: with a
   target CI width (or Δφ power) a bracketing/bisection search along the Pareto front (``bracket_search``)
   finds the cheapest design that reaches it in simulation;
4. emits the chosen runs as a sweep spec that ``loopscale sweep`` runs as it is, or (sequential mode) as new
   groups appended to a partial sweep's spec.

Units: budgets and FLOPs are training FLOPs (method §4.2), widths d_model, losses and σ nats, CI widths in the
parameter's own units (E in nats). NumPy/SciPy only.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from dataclasses import replace as dc_replace
from pathlib import Path

import numpy as np
from scipy.stats import norm

from loopscale.config import replace
from loopscale.errors import UserError
from loopscale.fit.analyses import parabola_minima
from loopscale.fit.bootstrap import bootstrap_fit, compare_phi
from loopscale.fit.fitter import fit_law
from loopscale.fit.law import (
    HUBER_DELTA,
    PARAMS,
    PHI,
    Design,
    at_bound,
    law_loss,
    objective_and_gradient,
    theta_to_coefficients,
)
from loopscale.fit.table import RunTable, load_table
from loopscale.paper import JOINT_FIT
from loopscale.sweep.plan import PlannedRun, plan_sweep
from loopscale.sweep.spec import BudgetWidths, RunGroup, SweepSpec

Z95 = float(norm.ppf(0.975))
DEFAULT_SIGMA = 0.01  # nats: the noise level of the paper's law fit (RMSE 0.010, method §9.2)
REPORTED = ("phi", "alpha", "beta", "E")  # the CI widths a design reports
AGREEMENT = 0.25  # prediction and realisation should agree within ±25%
TABLE_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".parquet")


# ------------------------------------------------------------------------------------------------ the prior


@dataclass(frozen=True)
class Prior:
    """The law a design is planned under and the noise of one run's final loss.

    ``theta`` is (a, b, e, α, β, φ) with A = eᵃ, B = eᵇ, E = eᵉ (``fit.law``); ``sigma`` the standard
    deviation of a run's final validation loss around the law, in nats (additive Gaussian).
    """

    theta: np.ndarray
    sigma: float
    source: str

    @classmethod
    def from_coefficients(cls, coef: dict, sigma: float, source: str) -> Prior:
        if not (math.isfinite(sigma) and sigma > 0):
            raise UserError(f"the noise level sigma must be a positive number of nats, got {sigma!r}")
        try:
            theta = [math.log(coef["A"]), math.log(coef["B"]), math.log(coef["E"])]
            theta += [float(coef["alpha"]), float(coef["beta"]), float(coef["phi"])]
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{source}: needs coefficients A, B, E > 0 and alpha, beta, phi") from None
        return cls(theta=np.array(theta), sigma=float(sigma), source=source)

    @property
    def phi(self) -> float:
        return float(self.theta[PHI])

    @property
    def coefficients(self) -> dict[str, float]:
        """{E, A, B, alpha, beta, phi, a, b, e}."""
        return theta_to_coefficients(self.theta)

    def loss(self, n_once, n_rec, r, tokens) -> np.ndarray:
        """The prior's noise-free final loss (nats)."""
        return law_loss(self.coefficients, n_once, n_rec, r, tokens)

    def to_dict(self) -> dict:
        coef = {k: v for k, v in self.coefficients.items() if k in ("E", "A", "B", "alpha", "beta", "phi")}
        return {**coef, "sigma": self.sigma, "source": self.source}


def load_prior(source: str, sigma: float | None = None, *, restarts: int = 200, seed: int = 0) -> Prior:
    """``paper`` (the published joint fit, method §9.2), a ``loopscale fit --json`` document, or a pilot
    results table (.csv/.jsonl/.parquet) fitted here. σ: given, else the fit's residual RMSE scaled by
    √(n/(n − 6)) for the six fitted parameters, else (paper) 0.01 nats."""
    if source == "paper":
        return Prior.from_coefficients(JOINT_FIT, DEFAULT_SIGMA if sigma is None else sigma, "paper (§9.2)")
    path = Path(source)
    if not path.is_file():
        raise UserError(
            f"prior {source!r}: not 'paper' and no such file (give a fit.json or a results table)"
        )
    if path.suffix.lower() == ".json":
        try:
            doc = json.loads(path.read_text())
            coef, n = doc["fit"], int(doc["fit"]["n_runs"])
            rmse = doc["residuals"]["overall"]["rmse"]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError):
            raise UserError(
                f"{path}: not a `loopscale fit --json` document (needs fit and residuals)"
            ) from None
        if coef.get("form") != "joint":
            raise UserError(
                f"{path}: the prior must be a joint fit with phi free, got form {coef.get('form')!r}"
            )
        noise = sigma if sigma is not None else rmse * math.sqrt(n / max(n - len(PARAMS), 1))
        return Prior.from_coefficients(coef, noise, f"fit document {path}")
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise UserError(
            f"prior {path}: use 'paper', a fit .json or a results table ({', '.join(TABLE_SUFFIXES)})"
        )
    return prior_from_table(load_table(path), sigma, f"joint fit of the pilot table {path}", restarts, seed)


def prior_from_table(
    table: RunTable, sigma: float | None, source: str, restarts: int = 200, seed: int = 0
) -> Prior:
    """Fit the joint law to ``table`` (``fit_law``); σ given, else the residual RMSE with n − 6 degrees of
    freedom."""
    fit = fit_law(table, restarts=restarts, seed=seed)
    resid = table.loss - fit.predict_table(table)
    noise = (
        sigma if sigma is not None else float(np.sqrt(np.sum(resid**2) / max(len(table) - len(PARAMS), 1)))
    )
    return Prior.from_coefficients(fit.coefficients, noise, source)


# ---------------------------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidates:
    """Every run a design may use, one per (budget, width, r) and one seed, with the planner's exact
    accounting; ``fixed`` marks runs that are already in the design (sequential mode: a partial sweep)."""

    runs: list[PlannedRun]
    spec: SweepSpec  # the sweep the runs come from (template, recipe, batch)
    group: RunGroup  # the group whose model/train/bptt new runs inherit
    fixed: np.ndarray  # bool [n]
    cost: np.ndarray | None = None  # [n] what the search minimises per run (e.g. est. wall s); None: FLOPs

    def with_cost(self, cost) -> Candidates:
        """The same candidates with the search minimising ``cost`` [n] (e.g. each run's share of the
        planner's wall-time estimate, ``ThroughputProbe.wall_shares``) instead of training FLOPs."""
        cost = np.asarray(cost, float)
        if cost.shape != (len(self.runs),) or not (np.isfinite(cost).all() and (cost > 0).all()):
            raise UserError(f"a per-run cost needs one positive number per candidate run ({len(self.runs)})")
        return dc_replace(self, cost=cost)

    @property
    def run_cost(self) -> np.ndarray:
        """What one run costs the search: ``cost`` if set, else its training FLOPs."""
        return self.flops if self.cost is None else self.cost

    @property
    def budget(self) -> np.ndarray:
        return np.array([run.budget for run in self.runs], float)

    @property
    def width(self) -> np.ndarray:
        return np.array([run.width for run in self.runs], float)

    @property
    def r(self) -> np.ndarray:
        return np.array([run.r for run in self.runs], int)

    @property
    def flops(self) -> np.ndarray:
        """Training FLOPs each run spends (F·B·steps)."""
        return np.array([run.total_flops for run in self.runs], float)

    def columns(self) -> dict[str, np.ndarray]:
        """n_once, n_rec, r, tokens of every candidate (the law's inputs)."""
        runs = self.runs
        return {
            "n_once": np.array([x.n_once for x in runs], float),
            "n_rec": np.array([x.n_rec for x in runs], float),
            "r": self.r,
            "tokens": np.array([x.tokens for x in runs], float),
        }

    def table(self, idx: np.ndarray, loss: np.ndarray, replicates: int = 1) -> RunTable:
        """A results table of runs ``idx`` (each ``replicates`` times) with the given losses (nats)."""
        idx = np.repeat(np.asarray(idx, int), replicates)
        seed = np.tile(np.arange(replicates), len(idx) // replicates)
        cols = self.columns()
        return load_table(
            {
                "run": [f"{self.runs[i].name}_s{s}" for i, s in zip(idx, seed)],
                "r": cols["r"][idx],
                "n_once": cols["n_once"][idx],
                "n_rec": cols["n_rec"][idx],
                "tokens": cols["tokens"][idx],
                "loss": loss,
                "budget": self.budget[idx],
                "width": self.width[idx],
            }
        )


def pick_group(spec: SweepSpec, name: str | None) -> RunGroup:
    """The group a design draws its template variant from: ``name``, else the first group with several r."""
    if name is not None:
        for group in spec.groups:
            if group.name == name:
                return group
        raise UserError(
            f"sweep {spec.name!r} has no group {name!r}; its groups: {[g.name for g in spec.groups]}"
        )
    for group in spec.groups:
        if len(group.rs) > 1:
            return group
    raise UserError(f"sweep {spec.name!r} has no group with several loop counts r: phi needs at least two")


def _budget_widths(
    grid: list[BudgetWidths], budget: float, widths: list[int] | None, group: str
) -> BudgetWidths:
    """The reference's cell at ``budget``, or a new one between the two reference budgets around it."""
    for cell in grid:
        if math.isclose(budget, cell.budget, rel_tol=1e-9):
            return cell
    if widths:
        return BudgetWidths(budget, sorted(set(int(w) for w in widths)))
    below = [c for c in grid if c.budget < budget]
    above = [c for c in grid if c.budget > budget]
    if not below or not above:
        raise UserError(
            f"budget {budget:.3g} lies outside group {group!r}'s range "
            f"({min(c.budget for c in grid):.3g}–{max(c.budget for c in grid):.3g}); "
            "give its candidate widths with --widths"
        )
    lo = max(below, key=lambda c: c.budget)
    hi = min(above, key=lambda c: c.budget)
    return BudgetWidths(budget, sorted(set(lo.widths) | set(hi.widths)))


def candidates_from_spec(
    spec: SweepSpec,
    *,
    group: str | None = None,
    budgets: list[float] | None = None,
    rs: list[int] | None = None,
    widths: list[int] | None = None,
) -> Candidates:
    """The candidate space of a reference sweep's group: its budgets × its widths per budget × its r,
    optionally restricted to ``budgets`` and ``rs`` or with ``widths`` (d_model) at every budget.

    A budget the reference does not hold is a new iso-FLOP curve: it takes ``widths`` when given, else, inside
    the reference's budget range, the union of the widths of the two reference budgets that enclose it (where
    its iso-FLOP minimum lies under any law decreasing in N and D)."""
    base = pick_group(spec, group)
    grid = base.grid
    if budgets:
        grid = [_budget_widths(grid, float(b), widths, base.name) for b in sorted(set(budgets))]
    if widths:
        grid = [BudgetWidths(c.budget, sorted(set(int(w) for w in widths))) for c in grid]
    chosen_rs = list(base.rs)
    if rs:
        bad = sorted(set(rs) - set(base.rs))
        if bad:
            raise UserError(f"r = {bad} not in group {base.name!r} (its r: {base.rs})")
        chosen_rs = sorted(set(rs))
    if len(chosen_rs) < 2:
        raise UserError(f"phi needs at least two loop counts r, got {chosen_rs}")
    if len(grid) < 2:
        raise UserError("a design needs at least two budgets (beta is unidentifiable at one)")
    group_spec = RunGroup(base.name, chosen_rs, grid, dict(base.model), dict(base.train), base.bptt)
    cand_spec = replace(spec, groups=[group_spec], seeds=[0])
    runs = plan_sweep(cand_spec)
    return Candidates(runs=runs, spec=spec, group=group_spec, fixed=np.zeros(len(runs), bool))


# ------------------------------------------------------------------------------------- predicted precision


def log_loss_jacobian(theta: np.ndarray, n_once, n_rec, r, tokens, chunk: int = 256) -> np.ndarray:
    """J [n, 6] = ∂ log L̂ᵢ / ∂θ at θ, read off ``objective_and_gradient`` (so it is the fit's own derivative).

    With δ = ∞ and every observed log loss one below the prediction, each residual is 1 and the gradient of
    ½·Σ wᵢ·residᵢ² is Σ wᵢ·Jᵢ; a one-hot weight row per run therefore returns that run's Jᵢ.
    """
    theta = np.asarray(theta, float)
    n_once, n_rec, r, tokens = (np.asarray(v, float) for v in (n_once, n_rec, r, tokens))
    coef = theta_to_coefficients(theta)
    jac = np.empty((len(n_once), len(PARAMS)))
    for lo in range(0, len(n_once), chunk):
        sl = slice(lo, lo + chunk)
        pred = law_loss(coef, n_once[sl], n_rec[sl], r[sl], tokens[sl])
        design = dc_replace(
            Design.build(n_once[sl], n_rec[sl], r[sl], tokens[sl], pred / math.e), delta=math.inf
        )
        k = len(pred)
        _, grad = objective_and_gradient(np.repeat(theta[None, :], k, axis=0), design, np.eye(k))
        jac[sl] = grad
    return jac


def huber_moments(scale: np.ndarray, delta: float = HUBER_DELTA) -> tuple[np.ndarray, np.ndarray]:
    """For a residual ε ~ N(0, scale²): (E ψ'(ε), E ψ(ε)²) = (P(|ε| ≤ δ), E min(ε², δ²))."""
    c = delta / np.asarray(scale, float)
    inside = 2 * norm.cdf(c) - 1
    meat = scale**2 * (inside - 2 * c * norm.pdf(c)) + delta**2 * (1 - inside)
    return inside, meat


@dataclass(frozen=True)
class Information:
    """Per-run pieces of the sandwich covariance of the Huber fit under a prior (see the module docstring)."""

    jac: np.ndarray  # [n, 6] ∂ log L̂ / ∂θ
    bread: np.ndarray  # [n] E ψ'(ε)
    meat: np.ndarray  # [n] E ψ(ε)²
    loss: np.ndarray  # [n] the prior's noise-free loss (nats)
    theta: np.ndarray

    @classmethod
    def build(cls, prior: Prior, cands: Candidates) -> Information:
        cols = cands.columns()
        loss = prior.loss(**cols)
        bread, meat = huber_moments(prior.sigma / loss)
        return cls(log_loss_jacobian(prior.theta, **cols), bread, meat, loss, prior.theta)

    def matrices(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(H, V) for run weights [n] (how often each run is in the design)."""
        jw = self.jac * weights[:, None]
        return (jw * self.bread[:, None]).T @ self.jac, (jw * self.meat[:, None]).T @ self.jac

    def covariance(self, weights: np.ndarray) -> np.ndarray:
        """Asymptotic covariance of θ̂ [6, 6]; infinite when the design cannot identify θ."""
        h, v = self.matrices(weights)
        if np.linalg.cond(h) > 1e13:
            return np.full((len(PARAMS), len(PARAMS)), np.inf)
        h_inv = np.linalg.inv(h)
        return h_inv @ v @ h_inv

    def phi_variance(self, weights: np.ndarray) -> float:
        return float(self.covariance(weights)[PHI, PHI])

    def ci_widths(self, weights: np.ndarray) -> dict[str, float]:
        """Predicted 95% CI widths 2·1.96·SE of φ, α, β and E (E by the delta method, nats)."""
        cov = self.covariance(weights)
        se = np.sqrt(np.diag(cov))
        se_e = math.exp(self.theta[2]) * se[2]
        return {
            "phi": 2 * Z95 * float(se[PHI]),
            "alpha": 2 * Z95 * float(se[3]),
            "beta": 2 * Z95 * float(se[4]),
            "E": 2 * Z95 * float(se_e),
        }


# ---------------------------------------------------------------------------------------- designs + search


@dataclass(frozen=True)
class RunDesign:
    """A set of candidate runs (indices into ``Candidates``), each run ``replicates`` times (seeds)."""

    idx: np.ndarray  # sorted candidate indices
    replicates: int = 1
    label: str = ""

    def weights(self, n: int) -> np.ndarray:
        w = np.zeros(n)
        w[self.idx] = self.replicates
        return w

    def flops(self, cands: Candidates) -> float:
        """Training FLOPs of the runs the design adds (fixed runs of a partial sweep are not counted)."""
        return self.cost(cands, cands.flops)

    def cost(self, cands: Candidates, per_run: np.ndarray | None = None) -> float:
        """Sum of ``per_run`` [n] (default: the search's ``cands.run_cost``) over the runs the design adds,
        × replicates (fixed runs of a partial sweep are not counted)."""
        per_run = cands.run_cost if per_run is None else per_run
        new = self.idx[~cands.fixed[self.idx]]
        return float(per_run[new].sum() * self.replicates)


@dataclass(frozen=True)
class Constraints:
    """What every design keeps: ≥ ``min_widths`` widths per included (budget, r) cell bracketing the prior's
    iso-FLOP minimum; the bottom and top budget; at every included budget the r of ``per_budget``: "ends"
    (r_min and r_max), "all" (every r) or "min" (r_min only; the other r where they pay); with
    ``max_budget_ratio``, no two neighbouring included budgets further apart than that factor (so the law is
    measured across the range, not only at its ends)."""

    min_widths: int = 3
    per_budget: str = "ends"
    max_budget_ratio: float | None = None

    def gaps(self, budgets: list[float]) -> list[tuple[float, float]]:
        """Neighbouring pairs of the sorted ``budgets`` further apart than ``max_budget_ratio``."""
        if self.max_budget_ratio is None:
            return []
        ordered = sorted(budgets)
        return [(a, b) for a, b in zip(ordered, ordered[1:]) if b > a * self.max_budget_ratio * (1 + 1e-9)]

    def required_rs(self, rs: list[int]) -> list[int]:
        """The loop counts every included budget must hold."""
        if self.per_budget not in PER_BUDGET:
            raise UserError(
                f"unknown per-budget rule {self.per_budget!r}; use one of {', '.join(PER_BUDGET)}"
            )
        return {"all": list(rs), "ends": [rs[0], rs[-1]], "min": [rs[0]]}[self.per_budget]


PER_BUDGET = ("ends", "all", "min")


def cell_keys(cands: Candidates) -> list[tuple[float, int]]:
    return sorted({(float(b), int(r)) for b, r in zip(cands.budget, cands.r)})


def cell_members(cands: Candidates, key: tuple[float, int]) -> np.ndarray:
    """Candidate indices of one (budget, r) cell, in order of width."""
    members = np.flatnonzero((cands.budget == key[0]) & (cands.r == key[1]))
    return members[np.argsort(cands.width[members], kind="stable")]


def bracketing_windows(cands: Candidates, info: Information, min_widths: int = 3) -> dict:
    """Per (budget, r) cell: {(lo, hi): candidate indices} for every contiguous run of ≥ ``min_widths`` widths
    whose parabola through the prior's noise-free losses has its vertex inside (``parabola_minima``)."""
    out: dict[tuple[float, int], dict[tuple[int, int], np.ndarray]] = {}
    for key in cell_keys(cands):
        members = cell_members(cands, key)
        windows = {}
        for lo in range(len(members)):
            for hi in range(lo + min_widths, len(members) + 1):
                idx = members[lo:hi]
                (row,) = parabola_minima(cands.table(idx, info.loss[idx]))
                if row["bracketed"]:
                    windows[(lo, hi)] = idx
        out[key] = windows
    return out


def check_design(
    cands: Candidates, info: Information, design: RunDesign, constraints: Constraints
) -> list[str]:
    """Which constraints ``design`` breaks (empty: none): unbracketed or thin cells, missing end budgets or
    r values. Fixed runs of a partial sweep count as part of the design."""
    problems = []
    chosen = np.zeros(len(cands.runs), bool)
    chosen[design.idx] = True
    chosen |= cands.fixed
    budgets = sorted(set(cands.budget.tolist()))
    rs = sorted(set(cands.r.tolist()))
    for end in (budgets[0], budgets[-1]):
        if not chosen[cands.budget == end].any():
            problems.append(f"budget {end:.3g} (an end of the range) is not included")
    for lo, hi in constraints.gaps(sorted(set(cands.budget[chosen].tolist()))):
        problems.append(
            f"budgets {lo:.3g} and {hi:.3g} are {hi / lo:.2f}x apart > {constraints.max_budget_ratio:g}x"
        )
    for b in sorted(set(cands.budget[chosen].tolist())):
        have = sorted(set(cands.r[chosen & (cands.budget == b)].tolist()))
        need = constraints.required_rs(rs)
        lacking = sorted(set(need) - set(have))
        if lacking:
            problems.append(f"budget {b:.3g} lacks r = {lacking}")
    for b, r in sorted({(float(b), int(r)) for b, r in zip(cands.budget[chosen], cands.r[chosen])}):
        idx = np.flatnonzero(chosen & (cands.budget == b) & (cands.r == r))
        if len(idx) < constraints.min_widths:
            problems.append(f"cell ({b:.3g}, r={r}) has {len(idx)} width(s) < {constraints.min_widths}")
            continue
        (row,) = parabola_minima(cands.table(idx, info.loss[idx]))
        if not row["bracketed"]:
            problems.append(f"cell ({b:.3g}, r={r}) does not bracket its predicted minimum: {row['reason']}")
    return problems


@dataclass(frozen=True)
class PathPoint:
    """One design on a search path: what it adds, its FLOPs, its cost to the search (``Candidates.run_cost``:
    FLOPs, or e.g. estimated wall seconds) and predicted 95% CI widths."""

    design: RunDesign
    flops: float
    predicted: dict[str, float]
    step: str  # the move that led here
    cost: float


class _Space:
    """The search space of ``greedy_path`` and ``pruning_path``: bracketing windows per cell, and designs as
    states {cell: window (lo, hi) in width order} on top of the fixed runs."""

    def __init__(
        self, cands: Candidates, info: Information, constraints: Constraints, replicates: int, name: str
    ):
        self.cands, self.info, self.replicates, self.name = cands, info, replicates, name
        self.steps = 0
        self.windows = bracketing_windows(cands, info, constraints.min_widths)
        self.min_widths = constraints.min_widths
        self.budgets = sorted(set(cands.budget.tolist()))
        self.need = constraints.required_rs(sorted(set(cands.r.tolist())))
        self.constraints = constraints
        self.cost = cands.run_cost * replicates
        self.fixed_idx = np.flatnonzero(cands.fixed)
        self.fixed_cells = {
            (float(b), int(r)) for b, r in zip(cands.budget[self.fixed_idx], cands.r[self.fixed_idx])
        }
        self.fixed_span = {}  # a partial sweep's cells: any contiguous window around the runs it has
        for key in self.fixed_cells:
            members = cell_members(cands, key)
            at = np.flatnonzero(cands.fixed[members])
            self.fixed_span[key] = (int(at.min()), int(at.max()) + 1)
            self.windows[key] = {
                (lo, hi): members[lo:hi]
                for lo in range(at.min() + 1)
                for hi in range(at.max() + 1, len(members) + 1)
            }

    def best_window(self, key) -> tuple[int, int] | None:
        """The ``min_widths``-width bracketing window of a cell whose centre is closest to the vertex."""
        windows = self.windows[key]
        options = [w for w in windows if w[1] - w[0] == self.min_widths]
        if not options:
            return None
        return min(
            options,
            key=lambda w: (_off_centre(self.cands, self.info, windows[w]), self.cost[windows[w]].sum()),
        )

    def indices(self, state) -> np.ndarray:
        parts = [self.windows[k][w] for k, w in state.items()] + [self.fixed_idx]
        return np.unique(np.concatenate(parts)).astype(int)

    def variance(self, state) -> float:
        return self.info.phi_variance(
            RunDesign(self.indices(state), self.replicates).weights(len(self.cands.runs))
        )

    def point(self, state, step: str) -> PathPoint:
        self.steps += 1
        design = RunDesign(
            self.indices(state), self.replicates, f"{self.name} x{self.replicates} #{self.steps}"
        )
        weights = design.weights(len(self.cands.runs))
        return PathPoint(
            design, design.flops(self.cands), self.info.ci_widths(weights), step, design.cost(self.cands)
        )

    def included(self, state) -> set[float]:
        return {k[0] for k in state}

    def smallest(self) -> dict:
        """The fixed cells as they are, plus the end budgets (and, with a maximum budget ratio, the fewest
        inner budgets that close every gap, each the furthest within reach) with their required r at the
        best-centred narrowest windows."""
        state = dict(self.fixed_span)
        for b in self._bridge({k[0] for k in self.fixed_cells} | {self.budgets[0], self.budgets[-1]}):
            if any(k[0] == b for k in self.fixed_cells):
                continue
            for r in self.need:
                w = self.best_window((b, r))
                if w is None:
                    raise UserError(
                        f"no window of {self.min_widths} candidate widths brackets the predicted minimum "
                        f"at budget {b:.3g}, r = {r}; add widths around it (--widths) or drop it (--budgets)"
                    )
                state[(b, r)] = w
        return state

    def _bridge(self, budgets: set[float]) -> list[float]:
        """``budgets`` plus the fewest candidate budgets that leave no gap above the maximum ratio."""
        chosen = sorted(budgets)
        while gaps := self.constraints.gaps(chosen):
            lo, hi = gaps[0]
            reach = [b for b in self.budgets if lo < b < hi and b <= lo * self.constraints.max_budget_ratio]
            if not reach:
                raise UserError(
                    f"no candidate budget between {lo:.3g} and {hi:.3g} within "
                    f"{self.constraints.max_budget_ratio:g}x of {lo:.3g}; add budgets (--budgets) or raise "
                    "--max-budget-ratio"
                )
            chosen = sorted({*chosen, max(reach)})
        return chosen

    def largest(self) -> dict:
        """Every cell that can be bracketed at its widest window, at budgets that hold the required r."""
        state = {key: max(ws, key=lambda w: w[1] - w[0]) for key, ws in self.windows.items() if ws}
        for b in self.budgets:
            if any((b, r) not in state for r in self.need) and not any(k[0] == b for k in self.fixed_cells):
                state = {k: w for k, w in state.items() if k[0] != b}
        if gaps := self.constraints.gaps(sorted(self.included(state))):
            lo, hi = gaps[0]
            raise UserError(
                f"budgets {lo:.3g} and {hi:.3g} are {hi / lo:.2f}x apart and no budget between them can "
                f"hold r = {self.need} bracketed; add budgets or widths, or raise --max-budget-ratio"
            )
        return state

    def growths(self, state):
        """Every state one addition away: widen a cell, add a cell at an included budget, add a budget."""
        included = self.included(state)
        for key, (lo, hi) in state.items():
            for w in ((lo - 1, hi), (lo, hi + 1)):
                if w in self.windows[key]:
                    yield f"widen ({key[0]:.3g}, r={key[1]})", {**state, key: w}
        for key in self.windows:
            if key not in state and key[0] in included:
                w = self.best_window(key)
                if w is not None:
                    yield f"add cell ({key[0]:.3g}, r={key[1]})", {**state, key: w}
        for b in self.budgets:
            if b in included:
                continue
            new = dict(state)
            for r in self.need:
                w = self.best_window((b, r))
                if w is None:
                    break
                new[(b, r)] = w
            else:
                yield f"add budget {b:.3g}", new

    def cuts(self, state):
        """Every state one removal away that keeps the constraints: narrow a cell, drop an optional cell,
        drop an inner budget."""
        ends = (self.budgets[0], self.budgets[-1])
        for key, (lo, hi) in state.items():
            for w in ((lo + 1, hi), (lo, hi - 1)):
                if w in self.windows[key]:
                    yield f"narrow ({key[0]:.3g}, r={key[1]})", {**state, key: w}
            if key[1] not in self.need and key not in self.fixed_cells:
                yield f"drop cell ({key[0]:.3g}, r={key[1]})", {k: v for k, v in state.items() if k != key}
        for b in {k[0] for k in state} - set(ends):
            left = self.included(state) - {b}
            if not any(k[0] == b for k in self.fixed_cells) and not self.constraints.gaps(sorted(left)):
                yield f"drop budget {b:.3g}", {k: v for k, v in state.items() if k[0] != b}


def greedy_path(
    cands: Candidates,
    info: Information,
    constraints: Constraints = Constraints(),
    replicates: int = 1,
    max_flops: float = math.inf,
) -> list[PathPoint]:
    """Grow a design from the smallest one the constraints allow (fixed runs, plus the bottom and top budget
    with the r ``constraints`` requires at their best-centred ``min_widths``-width bracketing windows) by the
    move that cuts Var(φ) most per added cost (``Candidates.run_cost``: FLOPs, or estimated wall seconds):
    add a cell at an included budget, add a budget (with its required r), or widen a cell's window by one
    width. Stops when nothing is left or at ``max_flops``."""
    space = _Space(cands, info, constraints, replicates, "greedy")
    state = space.smallest()
    path = [space.point(state, "start: end budgets")]
    while True:
        var0 = space.variance(state)
        best, best_gain = None, -math.inf
        for move, new in space.growths(state):
            cost = float(space.cost[np.setdiff1d(space.indices(new), path[-1].design.idx)].sum())
            if cost <= 0:
                continue
            var1 = space.variance(new)
            if math.isfinite(var0):
                gain = (var0 - var1) / cost
            else:  # not yet identified: the move that makes Var(φ) finite and smallest per unit cost
                gain = -var1 * cost if math.isfinite(var1) else -math.inf
            if gain > best_gain:
                best, best_gain = (move, new), gain
        if best is None:
            break
        nxt = space.point(best[1], best[0])
        if nxt.flops > max_flops:
            break
        state = best[1]
        path.append(nxt)
    return path


def pruning_path(
    cands: Candidates, info: Information, constraints: Constraints = Constraints(), replicates: int = 1
) -> list[PathPoint]:
    """Shrink the largest design the constraints allow (every bracketable cell at its widest bracketing
    window) by the removal that costs the least Var(φ) per unit of cost saved (``Candidates.run_cost``),
    down to the smallest; returned in order of increasing cost. Backward elimination often finds designs the
    forward path misses."""
    space = _Space(cands, info, constraints, replicates, "pruning")
    state = space.largest()
    path = [space.point(state, "start: every bracketable cell")]
    while True:
        var0 = space.variance(state)
        best, best_loss = None, math.inf
        for move, new in space.cuts(state):
            saved = float(space.cost[np.setdiff1d(path[-1].design.idx, space.indices(new))].sum())
            var1 = space.variance(new)
            if saved <= 0 or not math.isfinite(var1):
                continue
            loss = (var1 - var0) / saved
            if loss < best_loss:
                best, best_loss = (move, new), loss
        if best is None:
            break
        state = best[1]
        path.append(space.point(state, best[0]))
    return path[::-1]


def _off_centre(cands: Candidates, info: Information, idx: np.ndarray) -> float:
    """How far the prior's iso-FLOP vertex sits from the centre of a window, in units of its log-N span."""
    table = cands.table(idx, info.loss[idx])
    (row,) = parabola_minima(table)
    log_n = np.log(table.n)
    return abs(math.log(row["n_star"]) - 0.5 * (log_n.min() + log_n.max())) / (log_n.max() - log_n.min())


def pareto(points: list[PathPoint], key: str = "phi", score=None) -> list[PathPoint]:
    """The points no other point beats on both cost (``PathPoint.cost``) and predicted CI width of ``key``
    (or ``score(point)``, smaller is better), in order of increasing cost."""
    score = score or (lambda p: p.predicted[key])
    out, best = [], math.inf
    for p, value in sorted(((p, score(p)) for p in points), key=lambda item: (item[0].cost, item[1])):
        if value < best:
            out.append(p)
            best = value
    return out


def choose(
    points: list[PathPoint],
    target_ci: float | None,
    flop_cap: float | None,
    cost_cap: float | None = None,
) -> PathPoint:
    """The cheapest point (``PathPoint.cost``) whose predicted φ CI width ≤ ``target_ci``, or the narrowest
    within ``flop_cap`` FLOPs, or within ``cost_cap`` of the search's own cost (e.g. estimated wall
    seconds)."""
    if sum(x is not None for x in (target_ci, flop_cap, cost_cap)) != 1:
        raise UserError("give exactly one target: a CI width for phi, a FLOP cap or a wall-time cap")
    if target_ci is not None:
        ok = [p for p in points if p.predicted["phi"] <= target_ci]
        if not ok:
            best = min(p.predicted["phi"] for p in points)
            raise UserError(
                f"no design in the candidate space reaches a phi CI width of {target_ci:g} (best predicted "
                f"{best:.3g}); widen the space (more budgets, widths, --replicates) or relax the target"
            )
        return min(ok, key=lambda p: (p.cost, p.predicted["phi"]))
    ok = [p for p in points if within_cap(p, flop_cap, cost_cap)]
    if not ok:
        cap, unit, spent = (
            (flop_cap, "FLOPs", [p.flops for p in points])
            if flop_cap is not None
            else (cost_cap, "of the search's cost", [p.cost for p in points])
        )
        raise UserError(
            f"no design fits under {cap:.3g} {unit}; the smallest that keeps the constraints needs "
            f"{min(spent):.3g} (drop the top budget with --budgets, or raise the cap)"
        )
    return min(ok, key=lambda p: (p.predicted["phi"], p.flops))


def within_cap(point: PathPoint, flop_cap: float | None, cost_cap: float | None) -> bool:
    """Whether ``point`` spends at most ``flop_cap`` FLOPs and at most ``cost_cap`` of its cost (None: no
    cap of that kind)."""
    return (flop_cap is None or point.flops <= flop_cap) and (cost_cap is None or point.cost <= cost_cap)


# ---------------------------------------------------------------------------------------------- simulation


@dataclass(frozen=True)
class Realisation:
    """What ``K`` simulated sweeps of a design gave: the fit's 95% bootstrap CI widths (median over seeds),
    how often the CI covered the prior's φ, and the share of bootstrap refits with φ on the box."""

    k: int
    ci_width: dict[str, float]  # median over seeds
    coverage: float  # share of seeds whose φ CI covers the prior's φ
    phi_median: float
    phi_at_bound: float  # share of bootstrap refits (all seeds) with φ at a bound
    per_seed: list[dict] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


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
    loss, seeds ``seed``…``seed + k − 1``) and fit each with ``fit_law`` and ``bootstrap_fit``: the fit's own
    point estimate and 95% percentile CIs. ``restarts``/``bootstrap``/``bootstrap_restarts`` trade precision
    of each fit for time (``loopscale fit`` uses 500/200/20)."""
    if k < 1:
        raise UserError(f"--simulate needs at least 1 draw, got {k}")
    idx = np.repeat(design.idx, design.replicates)
    rows, phi_bound = [], []
    for j in range(k):
        rng = np.random.default_rng(seed + j)
        loss = info.loss[idx] + prior.sigma * rng.standard_normal(len(idx))
        table = cands.table(design.idx, loss, design.replicates)
        fit = fit_law(table, restarts=restarts, seed=seed + j)
        boot = bootstrap_fit(fit, table, resamples=bootstrap, restarts=bootstrap_restarts, seed=seed + j)
        ci = boot["ci"]
        lo, hi = ci["phi"]
        phis = boot["samples"]["phi"]
        thetas = np.zeros((len(phis), len(PARAMS)))
        thetas[:, PHI] = phis
        phi_bound.append(at_bound(thetas)[:, PHI])
        rows.append(
            {
                "seed": seed + j,
                "phi": fit.phi,
                "ci_phi": [lo, hi],
                "covered": bool(lo <= prior.phi <= hi),
                **{f"width_{name}": ci[name][1] - ci[name][0] for name in REPORTED},
            }
        )
    return Realisation(
        k=k,
        ci_width={name: float(np.median([row[f"width_{name}"] for row in rows])) for name in REPORTED},
        coverage=float(np.mean([row["covered"] for row in rows])),
        phi_median=float(np.median([row["phi"] for row in rows])),
        phi_at_bound=float(np.mean(np.concatenate(phi_bound))),
        per_seed=rows,
        settings={"restarts": restarts, "bootstrap": bootstrap, "bootstrap_restarts": bootstrap_restarts},
    )


def bracket_search(
    n: int, seed: int, passes, aim, max_evals: int, position=None, expand: float = 2.0
) -> tuple[int | None, list[int]]:
    """The lowest index i in [0, n) with ``passes(i)``, for a predicate (nearly) monotone in i — a design on a
    front ordered by cost that realises a target in simulation — with at most ``max_evals`` evaluations.

    ``seed`` is evaluated first. Bracketing: while nothing evaluated passes, the next index is ``aim(last)``
    but at least ``step`` above the highest failing one (capped at n − 1); while nothing evaluated fails,
    ``aim(last)`` but at least ``step`` below the lowest passing one (down to 0); ``step`` doubles after
    each bracketing move (1, 2, 4, …). With ``position`` (non-decreasing, positive [n], e.g. the designs'
    costs) a bracketing move also goes no further than ``expand`` × (or 1/``expand`` ×) the position it
    starts from, unless ``step`` forces it, so one far-off guess does not spend the bracket. Then bisection
    between the highest failing and the lowest passing index until they are adjacent: the next index is the
    one strictly between them whose position (default: the index) is nearest the middle of theirs, so the
    bracket halves in cost. ``aim(i)`` is the caller's guess of the answer after evaluating i (e.g.
    re-aimed with the optimism just measured). No index is evaluated twice.

    Returns (the lowest passing index evaluated, or None; every evaluated index in order)."""
    if not 0 <= seed < n or max_evals < 1:
        raise ValueError(f"bracket_search: need 0 <= seed < n, max_evals >= 1; got {seed}, {n}, {max_evals}")
    evaluated: list[int] = []
    fail, ok = -1, None  # highest failing index (-1: none failed), lowest passing (None: none passed)
    i, step = seed, 1
    pos = np.arange(n, dtype=float) if position is None else np.asarray(position, float)
    while True:
        evaluated.append(i)
        if passes(i):
            ok = i if ok is None else min(ok, i)
        else:
            fail = max(fail, i)
        if len(evaluated) >= max_evals or (ok is not None and ok - fail <= 1):
            break
        if ok is None:
            if fail >= n - 1:
                break
            guess = int(aim(i))
            if position is not None:  # the last index within expand × the failing position
                guess = min(guess, int(np.searchsorted(pos, expand * pos[fail], side="right")) - 1)
            i = min(max(guess, fail + step), n - 1)
            step *= 2
        elif fail < 0:
            guess = int(aim(i))
            if position is not None:  # the first index at or above the passing position / expand
                guess = max(guess, int(np.searchsorted(pos, pos[ok] / expand, side="left")))
            i = max(min(guess, ok - step), 0)
            step *= 2
        else:
            middle = 0.5 * (pos[fail] + pos[ok])
            i = min(range(fail + 1, ok), key=lambda j: abs(pos[j] - middle))
    return ok, evaluated


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
) -> tuple[PathPoint, Realisation, list[dict]]:
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
    log: list[dict] = []

    realised: dict[int, tuple[PathPoint, Realisation]] = {}  # id(point) -> every simulated design

    def run(point: PathPoint, target: float | None = None) -> Realisation:
        real = simulate(cands, info, prior, point.design, k, **settings)
        realised[id(point)] = (point, real)
        log.append(
            {
                "design": point.design.label,
                "idx": point.design.idx.tolist(),
                "replicates": point.design.replicates,
                "runs": int(len(point.design.idx) * point.design.replicates),
                "flops": point.flops,
                "cost": point.cost,
                "predicted": point.predicted,
                "realised": real.to_dict(),
                "reaches_target": None if target is None else bool(real.ci_width["phi"] <= target),
            }
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


def agreement(predicted: float, realised: float) -> str | None:
    """A sentence when the realised CI width is outside ±25% of the prediction, else None."""
    ratio = realised / predicted
    if abs(ratio - 1) <= AGREEMENT:
        return None
    side = "wider" if ratio > 1 else "narrower"
    return (
        f"the realised phi CI is {ratio:.2f}x the asymptotic prediction ({side} than ±25%): the Fisher "
        "information is not a reliable guide for this design (few cells, bound hits or a non-Gaussian fit); "
        "trust the simulation"
    )


# ---------------------------------------------------------------------------------------------- Δφ power


def delta_phi_se(info: Information, weights: np.ndarray, shared: np.ndarray) -> float:
    """Asymptotic SE of Δφ = φ(variant) − φ(base) when both arms run the design ``weights`` under the same
    law and the runs marked ``shared`` (the r = 1 anchors) are the same runs in both fits, so their noise
    enters both estimates and cancels in part: Var Δφ = 2·Var φ − 2·Cov, Cov = [H⁻¹·V_shared·H⁻¹]_φφ."""
    cov = info.covariance(weights)
    if not np.isfinite(cov).all():
        return math.inf
    h, _ = info.matrices(weights)
    _, v_shared = info.matrices(weights * shared)
    h_inv = np.linalg.inv(h)
    cross = (h_inv @ v_shared @ h_inv)[PHI, PHI]
    return float(math.sqrt(max(2 * cov[PHI, PHI] - 2 * cross, 0.0)))


def power(delta: float, se: float, level: float = 0.95) -> float:
    """Two-sided power of the level-``level`` test of Δφ = 0 when the true Δφ is ``delta``, its SE ``se``."""
    if not math.isfinite(se) or se <= 0:
        return 0.0
    z = float(norm.ppf(0.5 + level / 2))
    return float(norm.cdf(delta / se - z) + norm.cdf(-delta / se - z))


def power_table(
    cands: Candidates,
    info: Information,
    points: list[PathPoint],
    delta: float = 0.1,
    inflation: float = 1.0,
    label: str | None = None,
) -> list[dict]:
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
            {
                "label": label or p.design.label or p.step,
                "runs_base": int(len(p.design.idx) * p.design.replicates),
                "runs_variant": int(len(looped) * p.design.replicates),
                "flops_base": p.flops,
                "flops_variant": float(cands.flops[looped].sum() * p.design.replicates),
                "se_delta_phi": se,
                "power": power(delta, se),
            }
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
) -> dict:
    """Realised power of ``loopscale compare`` on ``design``: ``k`` pairs of tables, the base drawn from the
    prior and the variant from the prior with φ + ``delta`` on its looped runs, the r = 1 runs shared (the
    same losses in both); each pair goes through ``compare_phi`` (paired cell bootstrap) and counts as a
    detection when its 95% CI of Δφ excludes 0."""
    idx = np.repeat(design.idx, design.replicates)
    cols = {name: values[idx] for name, values in cands.columns().items()}
    shifted = Prior(prior.theta + np.eye(len(PARAMS))[PHI] * delta, prior.sigma, prior.source)
    looped = cols["r"] > 1
    rows = []
    for j in range(k):
        rng = np.random.default_rng(seed + j)
        base = info.loss[idx] + prior.sigma * rng.standard_normal(len(idx))
        variant = np.where(looped, shifted.loss(**cols) + prior.sigma * rng.standard_normal(len(idx)), base)
        out = compare_phi(
            cands.table(design.idx, base, design.replicates),
            cands.table(design.idx, variant, design.replicates),
            resamples=bootstrap,
            restarts=restarts,
            bootstrap_restarts=bootstrap_restarts,
            seed=seed + j,
        )
        lo, hi = out["ci"]["delta_phi"]
        rows.append(
            {"seed": seed + j, "delta_phi": out["delta_phi"], "ci": [lo, hi], "detected": lo > 0 or hi < 0}
        )
    return {
        "k": k,
        "delta_phi": delta,
        "power": float(np.mean([row["detected"] for row in rows])),
        "median_ci_width": float(np.median([row["ci"][1] - row["ci"][0] for row in rows])),
        "per_seed": rows,
    }


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
) -> tuple[PathPoint | None, dict | None, list[dict]]:
    """The cheapest design whose *simulated* Δφ power (``simulate_power``: ``k`` base/variant pairs through
    ``compare_phi``) ≥ ``target``, by ``bracket_search`` with at most ``rounds`` simulated designs.

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
    log: list[dict] = []
    sims: dict[int, dict] = {}

    def first_reaching(inflation: float) -> int:
        return next(
            (j for j, p in enumerate(front) if power(delta, se[id(p)] * inflation) >= target), len(front) - 1
        )

    def passes(i: int) -> bool:
        point = front[i]
        sims[i] = simulate_power(cands, info, prior, point.design, delta, k, **settings)
        (row,) = power_table(cands, info, [point], delta)  # runs and FLOPs per arm, SE, predicted power
        log.append(
            {
                **{key: v for key, v in row.items() if key not in ("label", "power")},
                "design": point.design.label,
                "idx": point.design.idx.tolist(),
                "replicates": point.design.replicates,
                "flops": point.flops,
                "cost": point.cost,
                "predicted_power": row["power"],
                "simulated": {key: v for key, v in sims[i].items() if key != "per_seed"},
                "reaches_target": bool(sims[i]["power"] >= target),
            }
        )
        return sims[i]["power"] >= target

    def aim(i: int) -> int:
        realised = min(max(sims[i]["power"], 0.5 / k), 1 - 0.5 / k)
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


# ---------------------------------------------------------------------------------------------- the spec


def design_groups(cands: Candidates, idx: np.ndarray, name: str) -> list[RunGroup]:
    """Runs ``idx`` as sweep groups of the candidates' group variant: (budget, width) pairs that share one set
    of r form one group (``name``, or ``name-r1.8`` style names when several sets are needed)."""
    by_point: dict[tuple[float, int], list[int]] = {}
    for i in idx:
        run = cands.runs[i]
        by_point.setdefault((run.budget, run.width), []).append(run.r)
    by_rs: dict[tuple[int, ...], dict[float, list[int]]] = {}
    for (budget, width), rs in sorted(by_point.items()):
        by_rs.setdefault(tuple(sorted(rs)), {}).setdefault(budget, []).append(width)
    base = cands.group
    groups = []
    for rs, grid in sorted(by_rs.items(), key=lambda item: (-len(item[0]), item[0])):
        label = name if len(by_rs) == 1 else f"{name}-r{'.'.join(map(str, rs))}"
        cells = [BudgetWidths(b, sorted(ws)) for b, ws in sorted(grid.items())]
        groups.append(RunGroup(label, list(rs), cells, dict(base.model), dict(base.train), base.bptt))
    return groups


def design_spec(cands: Candidates, design: RunDesign, name: str) -> SweepSpec:
    """A new sweep spec holding exactly the design's runs, each with ``replicates`` seeds."""
    groups = design_groups(cands, design.idx, cands.group.name)
    spec = replace(cands.spec, name=name, groups=groups, seeds=list(range(design.replicates)))
    plan_sweep(spec)  # refuses a spec the planner cannot run (one line)
    return spec


def extension_spec(cands: Candidates, design: RunDesign) -> SweepSpec:
    """The partial sweep's spec with the design's new runs appended as group(s) ``extN`` (the first free N):
    every planned run keeps its name and config, so ``loopscale sweep`` runs only the new ones."""
    spec = cands.spec
    new = design.idx[~cands.fixed[design.idx]]
    if len(new) == 0:
        raise UserError(
            "the design adds no runs to this sweep: no candidate run fits the target (raise --flop-cap, or "
            "offer more budgets or widths with --preset/SPEC, --budgets, --widths)"
        )
    names = {g.name.split("-r")[0] for g in spec.groups}
    n = 1
    while f"ext{n}" in names:
        n += 1
    extended = replace(spec, groups=[*spec.groups, *design_groups(cands, new, f"ext{n}")])
    plan_sweep(extended)
    return extended


def partial_sweep_candidates(spec: SweepSpec, failed: set[str], extra: Candidates) -> Candidates:
    """Sequential mode: the partial sweep's planned runs that have not failed (finished or still to run) as
    fixed runs, plus every candidate of ``extra`` not yet planned in the sweep (same budget, width and r)."""
    if any(g.model or g.train or g.bptt != "full" for g in spec.groups):
        raise UserError(
            "--from needs a sweep whose groups share one template and recipe (a case-study sweep mixes "
            "variants with different phi); design the extension from the main group's own table"
        )
    planned = plan_sweep(spec)
    finished = [run for run in planned if run.name not in failed]
    taken = {(run.budget, run.width, run.r) for run in planned}
    fresh = [run for run in extra.runs if (run.budget, run.width, run.r) not in taken]
    fixed = np.array([True] * len(finished) + [False] * len(fresh))
    return Candidates(runs=finished + fresh, spec=spec, group=extra.group, fixed=fixed)
