"""What a fitted law says: effective size, the worth of loops, equivalences, compute-optimal allocation.

Units: sizes are parameter counts, compute C is training FLOPs, D is tokens, losses are nats. Sizes and
per-token FLOPs as functions of width come from ``loopscale.accounting`` (exact paper formulas): every
count is a quadratic polynomial in d, so ``SizeModel`` reads its three coefficients off the accounting at
three widths (and checks them at a fourth) and then evaluates them at any continuous width. A truncated-BPTT
arm (k of r loops backpropagated, ``bptt_by_r``) is charged its FLOPs as trained: the r − k detached loops
forward only (method §2.6, §4.2); its parameter counts are those of full BPTT.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from loopscale.accounting import block_params, count_params, flops_per_token, injection_params, ls_split
from loopscale.config import ModelConfig
from loopscale.config import replace as replace_config
from loopscale.errors import UserError
from loopscale.fit.law import EXTENSIONS, LOWER, PHI, UPPER, extension_covariate, law_loss
from loopscale.fit.protocol_results import (
    MIN_PARABOLA_WIDTHS,
    CellGap,
    CellMinimum,
    Equivalence,
    Frontier,
    FrontierEntry,
    FrontierRow,
    LoopWorth,
    MinimumMiss,
    Residuals,
    ResidualStats,
)
from loopscale.fit.table import RunTable
from loopscale.paper import paper_template

SPLITS = ("paper", "ls")


def n_eff(n_once, n_rec, r, phi: float) -> np.ndarray:
    """N_eff = N_once + r^φ·N_rec (parameters)."""
    return np.asarray(n_once, float) + np.asarray(r, float) ** phi * np.asarray(n_rec, float)


def loop_worth(r: int, phi: float) -> LoopWorth:
    """r loops are worth r^φ unique blocks; ``fraction`` = r^φ / r of full equivalence."""
    worth = float(r) ** phi
    return LoopWorth(r=r, worth=worth, fraction=worth / r)


@dataclass(frozen=True)
class SizeModel:
    """N_once(d), N_rec(d), N(d) and F(d) of one (template, r) as exact quadratics in width d.

    ``split`` "paper" uses the paper's N_once/N_rec (method §3.1); "ls" the project page's least-squares split
    (method §3.4) for N_once/N_rec, while N stays the exact unique-parameter count. ``bptt_k``: loops
    backpropagated through (None: full BPTT, k = r); it changes F (training FLOPs per token) only.
    """

    r: int
    split: str
    coeffs: dict[str, np.ndarray]  # name → (c0, c1, c2) with value = c0 + c1·d + c2·d²
    bptt_k: int | None = None

    @classmethod
    def build(
        cls, template: ModelConfig, r: int, split: str = "paper", bptt_k: int | None = None
    ) -> SizeModel:
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
        bptt_k = None if bptt_k is None or int(bptt_k) == r else int(bptt_k)
        unit = template.head_dim
        widths = [unit * k for k in (2, 3, 5, 8)]
        samples = {"n_once": [], "n_rec": [], "n": [], "flops": []}
        for w in widths:
            cfg = replace_config(template, width=w, r=r, bptt_k=bptt_k)
            counts = count_params(cfg)
            once, rec = (counts.n_once, counts.n_rec) if split == "paper" else ls_split(cfg)
            samples["n_once"].append(once)
            samples["n_rec"].append(rec)
            samples["n"].append(counts.n)
            samples["flops"].append(flops_per_token(cfg))
        d = np.asarray(widths, float)
        vander = np.column_stack([np.ones(3), d[:3], d[:3] ** 2])
        coeffs = {}
        for name, values in samples.items():
            c = np.linalg.solve(vander, np.asarray(values[:3], float))
            check = c[0] + c[1] * d[3] + c[2] * d[3] ** 2
            if not math.isclose(check, values[3], rel_tol=1e-9):
                raise UserError(
                    f"{name} is not quadratic in width for this template; cannot solve over width"
                )
            coeffs[name] = c
        return cls(r=r, split=split, coeffs=coeffs, bptt_k=bptt_k)

    def __call__(self, name: str, width) -> np.ndarray:
        c = self.coeffs[name]
        d = np.asarray(width, float)
        return c[0] + c[1] * d + c[2] * d * d

    def width_for(self, name: str, value: float) -> float:
        """The continuous width at which ``name`` (e.g. "n") equals ``value``."""
        c0, c1, c2 = self.coeffs[name]
        return float((-c1 + math.sqrt(c1 * c1 - 4 * c2 * (c0 - value))) / (2 * c2))


def equivalence(
    params: float, r: int, phi: float, template: ModelConfig | None = None, bptt_k: int | None = None
) -> Equivalence:
    """A non-looped model of ``params`` parameters vs the r-loop model at the same width (method §9.8).

    Returns the looped model's unique and effective sizes (N_eff, paper split; and the layers-only ratio
    (ℓ_p + ℓ_c + r^φ·ℓ_rec)/depth that ignores the injection), its exact per-token training-FLOPs ratio to
    the non-looped model, the injection's share of block FLOPs (weights only), and the non-looped size with
    the same per-token training FLOPs (its training-cost equivalent). ``bptt_k``: the looped model trains
    with truncated BPTT through its last k loops (None: full BPTT), so its FLOPs are those as trained: the
    r − k detached loops forward only (method §2.6, §4.2); ``bptt_k`` in the output is k (None: full).
    """
    check_equivalence_inputs(params, r, phi, bptt_k)
    template = template or paper_template()
    try:
        lay = replace_config(template, width=template.head_dim * 4, r=r, bptt_k=bptt_k).layout()
    except UserError as exc:
        raise UserError(f"r = {r} does not fit this template: {exc}") from None
    plain, looped = SizeModel.build(template, 1), SizeModel.build(template, r, bptt_k=bptt_k)
    smallest = float(plain("n", template.head_dim))
    if params < smallest:
        raise UserError(
            f"{params:,.0f} parameters is smaller than one head at this template: the narrowest model "
            f"(d = head_dim = {template.head_dim}) already has {smallest:,.0f} non-embedding parameters"
        )
    width = plain.width_for("n", params)
    unique = float(looped("n", width))
    effective = float(n_eff(looped("n_once", width), looped("n_rec", width), r, phi))
    flops_looped = float(looped("flops", width))
    layers_only = (lay.prelude + lay.coda + float(r) ** phi * lay.rec_layers) / lay.effective_depth
    # loops as charged for weights: k forward + backward (6×), r − k forward only (2×), in units of 6×
    k = r if looped.bptt_k is None else looped.bptt_k
    loops_charged = k + (r - k) / 3
    block_flops = (lay.prelude + lay.coda + loops_charged * lay.rec_layers) * block_params(width)
    return Equivalence(
        params=float(params),
        r=r,
        phi=phi,
        bptt_k=looped.bptt_k,
        width=width,
        unique_params=unique,
        unique_ratio=unique / params,
        effective_params=effective,
        effective_ratio=effective / params,
        effective_ratio_layers_only=layers_only,
        worth=float(r) ** phi,
        flops_ratio=flops_looped / float(plain("flops", width)),
        block_flops_overhead=loops_charged * injection_params(width, lay) / block_flops,
        cost_equivalent_params=float(plain("n", plain.width_for("flops", flops_looped))),
    )


@dataclass(frozen=True)
class TruncatedBptt:
    """Which loop counts of a results table trained with truncated BPTT: ``k`` maps r to the k < r loops its
    runs backpropagated through; an r not in it trains with full BPTT."""

    k: dict[int, int]

    def at(self, r: int) -> int | None:
        """The loops backpropagated at ``r`` (None: full BPTT)."""
        return self.k.get(r)


def bptt_by_r(table: RunTable) -> TruncatedBptt:
    """The truncated-BPTT FLOPs model of a results table: r → k for every r > 1 whose runs all backpropagated
    through the same k < r loops (the table's ``bptt_k`` column). An r whose runs have k = r or no k (NaN)
    trains with full BPTT and is left out. Runs at one r that disagree (k = 2 beside k = 4 or none) are a
    one-line UserError: one frontier per r needs one FLOPs model."""
    out: dict[int, int] = {}
    for r in sorted(set(int(v) for v in table.r)):
        ks = np.asarray(table.bptt_k[table.r == r], float)
        ks = np.where(np.isfinite(ks), ks, float(r))  # no k recorded: full BPTT
        bad = [k for k in ks.tolist() if not (float(k).is_integer() and 1 <= k <= r)]
        if bad:
            raise UserError(f"r = {r}: bptt_k = {bad[0]:g} is not a whole number of loops in 1..{r}")
        found = sorted(set(int(k) for k in ks.tolist()))
        if len(found) > 1:
            named = ", ".join("full" if k == r else f"k = {k}" for k in found)
            raise UserError(
                f"the runs at r = {r} disagree on truncated BPTT ({named}): one FLOPs model per r is needed "
                f"for the frontier; fit each bptt_k's runs separately"
            )
        if found[0] < r:
            out[r] = found[0]
    return TruncatedBptt(out)


MAX_PARAMS = 1e15  # larger sizes are typos (a quadrillion non-embedding parameters)


def check_equivalence_inputs(params: float, r: int, phi: float, bptt_k: int | None = None) -> None:
    """Refuse NaN/inf/non-positive/absurd sizes, r < 1, φ outside the fit box and a truncation window
    ``bptt_k`` outside 1..r (one-line UserError)."""
    if not (isinstance(params, int | float) and math.isfinite(params) and params > 0):
        raise UserError(f"params must be a finite positive parameter count, got {params!r}")
    if params > MAX_PARAMS:
        raise UserError(f"params = {params:g} is absurd (more than {MAX_PARAMS:g}); give a parameter count")
    if not (isinstance(r, int) or float(r).is_integer()) or r < 1:
        raise UserError(f"r must be a whole number >= 1, got {r!r}")
    if phi is None or not math.isfinite(phi) or not LOWER[PHI] <= phi <= UPPER[PHI]:
        raise UserError(
            f"phi must be a finite number in the fit box [{LOWER[PHI]:g}, {UPPER[PHI]:g}], got {phi!r}"
        )
    if bptt_k is not None and not (float(bptt_k).is_integer() and 1 <= bptt_k <= r):
        raise UserError(f"bptt_k must be a whole number of loops in 1..r = {r:g}, got {bptt_k!r}")


def residual_stats(observed: np.ndarray, predicted: np.ndarray, r: np.ndarray) -> Residuals:
    """Residuals observed − predicted (nats): n, mean, max |resid|, RMSE overall and per r."""

    def stats(res: np.ndarray) -> ResidualStats:
        return ResidualStats(
            n=int(res.size),
            mean=float(res.mean()),
            max_abs=float(np.abs(res).max()),
            rmse=float(np.sqrt(np.mean(res**2))),
        )

    res = np.asarray(observed, float) - np.asarray(predicted, float)
    per_r = {str(k): stats(res[r == k]) for k in sorted(set(r.tolist()))}
    return Residuals(overall=stats(res), per_r=per_r)


def compute_optimal(
    coef: dict[str, float],
    budgets,
    rs,
    template: ModelConfig | None = None,
    split: str = "paper",
    width_range: tuple[float, float] | None = None,
    widths_run: tuple[float, float] | None = None,
    extension: tuple[str, float | None] | None = None,
    bptt_k: dict[int, int] | None = None,
) -> Frontier:
    """Minimise L(N_eff(d), C/F(d)) over continuous width d for every (r, C) (method §8.7, §9.6).

    ``extension`` (name, covariate centre): ``coef`` is a fit of that one-parameter extension of the law
    (``law.EXTENSIONS``, with ``ext``); the law is then evaluated with its covariate at every candidate.
    ``coef`` is a fitted law ({E, A, B, alpha, beta[, phi]}; without phi the plain law with N = unique
    parameters). Returns per r: rows {budget, width, n, n_eff, tokens, loss} at the optimum, the exponents
    a_N, a_D of N* ∝ C^a_N and D* ∝ C^a_D (least squares in log-log over the budgets), and the loss gap to
    r = 1 per budget when r = 1 is among ``rs``. ``width_range`` defaults to [head_dim, 65,536]: the
    narrowest legal width (one head) up to far beyond any grid. An optimum on its edge is flagged
    (``at_edge``); with ``widths_run`` (the narrowest and widest width of the runs behind the fit) each row
    also says whether its optimum lies inside that range (``within_widths_run``; outside it is an
    extrapolation of the law).

    ``bptt_k`` (r → k, ``bptt_by_r(...).k``): the r whose runs trained with truncated BPTT through k loops;
    their F(d) is the FLOPs per token as trained (so D = C/F is the tokens such a run sees). The result
    records it as ``bptt_k`` ({"4": 2, …}; empty: full BPTT at every r).
    """
    template = template or paper_template()
    width_range = width_range or (float(template.head_dim), 65536.0)
    budgets = sorted(float(b) for b in budgets)
    phi = coef.get("phi")
    bptt_k = {int(r): int(k) for r, k in (bptt_k or {}).items()}

    def _covariate(once, rec, r: int, c: float) -> tuple:
        """(extension, z) for ``law_loss`` under an extension; nothing for the paper's law."""
        if extension is None:
            return ()
        return extension[0], extension_covariate(extension[0], once, rec, r, c, extension[1])

    frontier: dict[str, FrontierEntry] = {}
    for r in sorted(set(int(v) for v in rs)):
        sizes = SizeModel.build(template, r, split, bptt_k.get(r))
        rows = []
        for c in budgets:

            def loss_at(log_d: float, c: float = c, sizes: SizeModel = sizes, r: int = r) -> float:
                d = math.exp(log_d)
                once, rec = sizes("n_once", d), sizes("n_rec", d)
                tokens = c / sizes("flops", d)
                return float(law_loss(coef, once, rec, r, tokens, *_covariate(once, rec, r, c)))

            lo, hi = math.log(width_range[0]), math.log(width_range[1])
            res = minimize_scalar(loss_at, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
            d = math.exp(res.x)
            once, rec = float(sizes("n_once", d)), float(sizes("n_rec", d))
            phi_here = phi
            if extension is not None and EXTENSIONS[extension[0]].target == "phi":
                phi_here = phi + coef["ext"] * float(_covariate(once, rec, r, c)[1])
            inside = None
            if widths_run is not None:
                inside = bool(widths_run[0] * (1 - 1e-9) <= d <= widths_run[1] * (1 + 1e-9))
            rows.append(
                FrontierRow(
                    budget=c,
                    width=d,
                    n=float(sizes("n", d)),
                    n_eff=once + rec if phi is None else float(n_eff(once, rec, r, phi_here)),
                    tokens=c / float(sizes("flops", d)),
                    loss=float(res.fun),
                    at_edge=bool(min(res.x - lo, hi - res.x) < 1e-3),
                    within_widths_run=inside,
                )
            )
        slopes = {}
        if len(budgets) >= 2:
            log_c = np.log(budgets)
            slopes["a_N"] = float(np.polyfit(log_c, np.log([row.n for row in rows]), 1)[0])
            slopes["a_D"] = float(np.polyfit(log_c, np.log([row.tokens for row in rows]), 1)[0])
        frontier[str(r)] = FrontierEntry(rows=tuple(rows), **slopes)
    if "1" in frontier:
        base = {row.budget: row.loss for row in frontier["1"].rows}
        frontier = {
            r: dataclasses.replace(entry, gap_to_r1=tuple(row.loss - base[row.budget] for row in entry.rows))
            for r, entry in frontier.items()
        }
    truncated = {str(r): bptt_k[r] for r in sorted(bptt_k) if str(r) in frontier and bptt_k[r] < r}
    return Frontier(split=split, budgets=tuple(budgets), per_r=frontier, bptt_k=truncated)


def parabola_minima(table: RunTable) -> tuple[CellMinimum, ...]:
    """Empirical iso-FLOP minima (method §8.7, §9.5): per (budget, r) cell, a least-squares parabola of loss
    in log N (N = unique parameters) through the cell's runs and its vertex (N*, L*).

    A vertex is reported only when the runs bracket it (``bracketed`` true): at least 3 distinct sizes, a
    parabola that opens upwards, and a vertex inside [smallest, largest] N run. Otherwise ``n_star`` and
    ``loss_star`` are None and ``reason`` codes why (``protocol_results.MinimumMiss``); an extrapolated
    vertex is never given as a number (it can be absurd, e.g. a negative loss). ``runs_bracket`` is the
    stricter, model-free test: the lowest-loss run has a larger-loss run on each side in N. A vertex that is
    bracketed while its runs are not (lowest loss at the narrowest or widest run) rests on the parabola's
    shape alone.
    """
    if not table.has_budget:
        return ()
    out = []
    for c, r in sorted({(float(b), int(k)) for b, k in zip(table.budget, table.r)}):
        mask = (table.budget == c) & (table.r == r)
        log_n, loss = np.log(table.n[mask]), table.loss[mask]
        vertex: dict = {}
        why: MinimumMiss | None = None
        if len(set(log_n.tolist())) < MIN_PARABOLA_WIDTHS:
            why = "few_widths"
        else:
            c2, c1, c0 = np.polyfit(log_n, loss, 2)
            x_star = -c1 / (2 * c2) if c2 > 0 else math.nan
            if not c2 > 0:
                why = "opens_downward"
            elif x_star < log_n.min():
                why = "below_widths"
            elif x_star > log_n.max():
                why = "above_widths"
            else:
                vertex = dict(n_star=float(math.exp(x_star)), loss_star=float(c0 - c1 * c1 / (4 * c2)))
        cell = CellMinimum(
            budget=c,
            r=r,
            n_runs=int(mask.sum()),
            n_star=vertex.get("n_star"),
            loss_star=vertex.get("loss_star"),
            bracketed=bool(vertex),
            runs_bracket=bool(log_n.min() < log_n[np.argmin(loss)] < log_n.max()),
            reason=why,
        )
        out.append(cell)
    return tuple(out)


def cell_gaps(minima: tuple[CellMinimum, ...]) -> tuple[CellGap, ...]:
    """L*(r) − L*(r = 1) (nats) per budget from per-cell minima (``parabola_minima``), bracketed cells at a
    budget whose r = 1 cell is bracketed too."""
    base = {m.budget: m.loss_star for m in minima if m.r == 1 and m.loss_star is not None}
    return tuple(
        CellGap(budget=m.budget, r=m.r, gap=m.loss_star - base[m.budget])
        for m in minima
        if m.r != 1 and m.loss_star is not None and m.budget in base
    )
