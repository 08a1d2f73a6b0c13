"""Plans that separate: which pairs to train so that each term of the pair analysis can be named per hour
(issue 51), not Δφ's SE alone.

The pair analysis (pairs.effects) names four things from the pairs' excess: a change of every model
(``every``: a constant on every pair, only told from the others with r = 1 pairs), a loop-specific
``offset`` (a constant on the looped pairs), ``delta_phi`` (∝ ∂L/∂φ, which grows with r and is 0 at r = 1)
and, beyond the chosen model, a ``width`` slope of the excess (nats per decade of width). Ranking cells by
Δφ's SE beyond an offset alone picks the base's largest-r, most expensive-per-slope cells, whose ∂L/∂φ
moves nearly in step with the offset column (cosine 0.927 on the Parcae arm's 21 pairs): the criterion then
buys precision of a contrast it cannot separate.

**Criterion (weighted A-optimality per hour, greedy).** A set S of cells costs hours; what it buys is each
term's design variance V_t(S) under the pairs' known errors Σ = σ²I + τ²ZZᵀ (design.paired): the GLS
information of the columns X = [every, offset, ∂L/∂φ] (and, for the width slope, the same plus log₁₀ width)
plus a weak prior worth an SE of ``PRIOR_SCALE`` × the term's size (so a term the cells cannot estimate yet
counts as that much unknown, not as infinite), inverted. The plan adds, each time, the cell that lowers

    A(S) = Σ_t V_t(S) / s_t²,    s_t = ``TERM_SIZES`` (the smallest size each term is to be named at),

most per second of training. Why this one: the power to name term t at size s_t rises with z_t = s_t/SE_t,
and A = Σ 1/z_t², so a cell pays by raising the weakest z most (the worst term dominates the sum) while a
term already well pinned stops attracting cells. Unlike D-optimality (the volume of the joint ellipsoid) it
is in the units the rule tests, and unlike greedy on the single worst term it does not stall where one cell
cannot move that term alone (an every-model change needs an r = 1 pair and a looped pair at once).

**Candidates.** The base's looped cells (the variant run pairs with the base run), the base's r = 1 cells
(the variant's own r = 1 run pairs with the base's r = 1 run: these pin ``every``), and, where asked, cells
the base lacks (a **base extension**: widths outside the base's, budgets beyond its largest). An extension
cell costs its base run and its variant run, each at the base's measured cost model (``extension_seconds``),
and its ∂L/∂φ is the base law's at a cell the law was not fitted on (an extrapolation).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from loopscale.fit.table import RunTable
from loopscale.pairs.results import PlanSeparation
from loopscale.pairs.rule import known_covariance, known_sandwich

if TYPE_CHECKING:
    from loopscale.design.paired import PairPlan
    from loopscale.sweep.plan import PlannedRun
    from loopscale.sweep.spec import SweepSpec

# The smallest size each term is to be named at: nats (every, offset), φ (delta_phi), nats per decade of
# width (width: 0.06 is a 0.024 nats difference across the base's widths 32–80).
TERM_SIZES = {"every": 0.03, "offset": 0.03, "delta_phi": 0.08, "width": 0.06}
TERMS = tuple(TERM_SIZES)
PRIOR_SCALE = 10.0  # a term no cell informs counts as an SE of 10 × its size
CRITERION = "A-optimal per hour: sum over every, offset, delta phi, width of (design SE / size)^2"
DELTA_PHI_ONLY = "delta phi's SE beyond an offset per hour (the plan before issue 51)"


@dataclass(frozen=True)
class Candidates:
    """Cells a plan may pair at: ``table`` (the base's rows first, in the base's order, then any extension
    cells, whose loss is NaN), ∂L̂/∂φ at each (nats per unit of φ), the wall seconds of training what the
    pair lacks (the variant run; an extension cell's base run too), whether the cell extends the base, each
    cell's (r, width) group and the reference width of the width column (the base's geometric mean)."""

    table: RunTable
    slope: np.ndarray
    cost: np.ndarray
    extension: np.ndarray  # bool
    cluster: np.ndarray  # int
    ref_width: float


def columns(c: Candidates, rows) -> np.ndarray:
    """The term columns [n, 4] (``TERMS`` order) at ``rows``: 1, r > 1, ∂L/∂φ, log₁₀(width / reference)."""
    rows = np.asarray(rows, int)
    t = c.table
    return np.column_stack(
        [np.ones(len(rows)), (t.r[rows] > 1).astype(float), c.slope[rows],
         np.log10(t.width[rows] / c.ref_width)]
    )  # fmt: skip


def information(x: np.ndarray, cluster: np.ndarray, sd: float, cluster_sd: float) -> np.ndarray:
    """Xᵀ Σ⁻¹ X [k, k] for Σ = sd²I + cluster_sd²ZZᵀ (nats²), group by group: (σ²I + τ²11ᵀ)⁻¹ =
    (I − τ²/(σ² + n_g τ²) 11ᵀ)/σ²."""
    info = x.T @ x
    for g in np.unique(cluster):
        s = x[cluster == g].sum(axis=0)
        n = int((cluster == g).sum())
        info -= cluster_sd**2 / (sd**2 + n * cluster_sd**2) * np.outer(s, s)
    return info / sd**2


def term_variances(
    x: np.ndarray, cluster: np.ndarray, sd: float, cluster_sd: float, every: bool = True
) -> np.ndarray:
    """Each term's design variance with the weak prior, in ``TERMS`` order (without ``every``, where the
    plan can train no r = 1 pair, the three others): every, offset and Δφ in the rule's model [every,
    offset, ∂L/∂φ]; the width slope beyond it (with the width column)."""
    keep = [k for k, t in enumerate(TERMS) if every or t != "every"]
    prior = np.array([1 / (PRIOR_SCALE * TERM_SIZES[TERMS[k]]) ** 2 for k in keep])
    info = information(x[:, keep], cluster, sd, cluster_sd) + np.diag(prior)
    rule = np.linalg.inv(info[:-1, :-1])
    return np.array([*np.diag(rule), np.linalg.inv(info)[-1, -1]])


def criterion(x: np.ndarray, cluster: np.ndarray, sd: float, cluster_sd: float, every: bool = True) -> float:
    """A(S) = Σ_t V_t / s_t² (module docstring) over the terms the plan can name: lower separates better."""
    sizes = np.array([TERM_SIZES[t] for t in TERMS if every or t != "every"])
    return float(np.sum(term_variances(x, cluster, sd, cluster_sd, every) / sizes**2))


def order_cells(
    c: Candidates, candidates, sd: float, cluster_sd: float, count: int, start=()
) -> tuple[int, ...]:
    """Greedy: from ``start`` (rows already chosen, kept first and in order), add among ``candidates`` the
    row that lowers ``criterion`` most per second of ``c.cost`` until ``count`` rows (or none is left). The
    every-model term counts only where the candidates hold an r = 1 cell."""
    chosen = [int(i) for i in start]
    rest = [int(i) for i in candidates if int(i) not in chosen]
    every = bool(np.any(c.table.r[[*chosen, *rest]] == 1))
    x_all = columns(c, np.arange(len(c.table)))

    def score(rows: list[int]) -> float:
        return criterion(x_all[rows], c.cluster[rows], sd, cluster_sd, every)

    while len(chosen) < count and rest:
        now = score(chosen)
        gains = [(now - score([*chosen, i])) / c.cost[i] for i in rest]
        chosen.append(rest.pop(int(np.argmax(gains))))
    return tuple(chosen)


def separation(
    c: Candidates, rows, sd: float, cluster_sd: float, chosen_by: str = CRITERION
) -> PlanSeparation:
    """What the pairs at ``rows`` tell apart, as the analysis reads them (least squares, the known-Σ
    sandwich, no prior): the cosine of the offset and ∂L/∂φ columns over the looped pairs and the condition
    number of the pair of unit columns (as ``pairs.effects.separability``), the SE of Δφ beyond an offset
    (columns [1, ∂L/∂φ] over the looped pairs), and each term's SE in the rule's model (every only with
    r = 1 pairs; the width slope beyond it, with three widths at least). None: not estimable. ``chosen_by``:
    the criterion that chose the rows."""
    rows = np.asarray(rows, int)
    looped = c.table.r[rows] > 1
    g = c.slope[rows][looped]
    cosine = float(abs(g.sum()) / math.sqrt(max(len(g) * float(np.sum(g**2)), 1e-300)))
    condition = math.sqrt((1 + cosine) / max(1 - cosine, 1e-300))
    x = columns(c, rows)
    plain = int((~looped).sum())
    model = [0, 1, 2] if plain else [1, 2]
    cov = known_covariance(c.cluster[rows], sd, cluster_sd)
    ses = dict.fromkeys(TERMS)
    if np.linalg.matrix_rank(x[:, model]) == len(model):
        ses.update(zip([TERMS[k] for k in model], np.sqrt(np.diag(known_sandwich(x[:, model], cov)))))
    full = [*model, 3]
    if len(set(c.table.width[rows].tolist())) >= 3 and np.linalg.matrix_rank(x[:, full]) == len(full):
        ses["width"] = float(np.sqrt(known_sandwich(x[:, full], cov)[-1, -1]))
    beyond = known_sandwich(x[looped][:, [1, 2]], known_covariance(c.cluster[rows][looped], sd, cluster_sd))
    return PlanSeparation(
        criterion=chosen_by,
        cosine=cosine,
        condition=condition,
        se_delta_phi=float(math.sqrt(beyond[1, 1])),
        se_every=_num(ses["every"]),
        se_offset=_num(ses["offset"]),
        se_width=_num(ses["width"]),
        plain=plain,
        extension=int(c.extension[rows].sum()),
    )


def _num(v) -> float | None:
    return None if v is None else float(v)


def extension_seconds(rows: list[dict], runs: list[PlannedRun]) -> np.ndarray:
    """Wall seconds of each planned run from the base's own measured cost (its ``results.csv`` rows, as
    ``sweep.plan.MeasuredTimes`` reads them): its steps at the median seconds per training step of the
    base's runs at the same (width, r); at a width the base never ran, at the training FLOPs per second of
    the base's nearest width at that r (an extrapolation: narrower models run fewer FLOPs per second, so a
    narrower width is costed low); plus the base's median overhead per run (wall − training time)."""
    per: dict[tuple[int, int], list[float]] = {}
    rate: dict[tuple[int, int], list[float]] = {}
    over = []
    for row in rows:
        train, wall, steps = (float(row.get(k) or math.nan) for k in ("train_time_s", "wall_time_s", "steps"))
        if not (math.isfinite(train) and math.isfinite(wall) and steps > 0):
            continue
        key = (int(float(row["width"])), int(float(row["r"])))
        per.setdefault(key, []).append(train / steps)
        rate.setdefault(key, []).append(float(row["flops_per_token"]) * float(row["tokens"]) / train)
        over.append(wall - train)
    overhead = statistics.median(over)

    def train_seconds(run: PlannedRun) -> float:
        key = (run.width, run.r)
        if key in per:
            return run.steps * statistics.median(per[key])
        near = min((k for k in rate if k[1] == run.r), key=lambda k: abs(math.log(k[0] / run.width)))
        return run.total_flops / statistics.median(rate[near])

    return np.array([train_seconds(run) + overhead for run in runs])


# Cells a base extension may add (issue 51): widths outside the laptop base's 32–80 (multiples of its head
# dimension 16) and a budget beyond its largest, 1.25e13 FLOPs; at the base's own loop counts, seed 0.
EXTENSION_WIDTHS = (16, 96, 128)
EXTENSION_BUDGETS = (2e13,)


def extension_runs(plan: PairPlan) -> list[PlannedRun]:
    """The base runs an extension could add: every (budget, width) of the base's budgets and
    ``EXTENSION_BUDGETS`` × its widths and ``EXTENSION_WIDTHS`` the base lacks, at its loop counts, seed 0,
    with the base's template (``plan.spec``)."""
    from loopscale.sweep.plan import plan_sweep

    t = plan.table
    have = {(float(b), int(w)) for b, w in zip(t.budget, t.width)}
    budgets = sorted({*map(float, t.budget), *EXTENSION_BUDGETS})
    widths = sorted({*map(int, t.width), *EXTENSION_WIDTHS})
    rs = sorted({int(r) for r in t.r})
    grid = [{"budget": b, "widths": [w]} for b in budgets for w in widths if (b, w) not in have]
    cells = [(c["budget"], c["widths"][0], r) for c in grid for r in rs]
    return plan_sweep(extension_sweep(plan.spec, cells, "ext"))


def extension_sweep(base: dict, cells, name: str) -> SweepSpec:
    """The sweep of base runs at ``cells`` ((budget FLOPs, width, r), seed 0) with the base's template,
    recipe and data (``base``: its sweep.yaml mapping): one group per (budget, width)."""
    from loopscale.config import from_dict
    from loopscale.sweep.spec import SweepSpec

    by_cell: dict[tuple[float, int], list[int]] = {}
    for budget, width, r in cells:
        by_cell.setdefault((float(budget), int(width)), []).append(int(r))
    groups = [
        {"name": f"ext-d{width}-C{budget / 1e9:.0f}G", "rs": sorted(set(rs)), "seeds": [0],
         "grid": [{"budget": budget, "widths": [width]}]}
        for (budget, width), rs in sorted(by_cell.items())
    ]  # fmt: skip
    keys = ("batch_tokens", "model", "train", "nproc")
    data = {"name": name, **{k: base[k] for k in keys if k in base}, "groups": groups}
    return from_dict(SweepSpec, data, name)


def candidates(plan: PairPlan, rows: list[dict], cost: np.ndarray, extend: bool) -> Candidates:
    """Every cell a plan may pair at (``Candidates``): the base's runs (``cost``: each one's measured wall
    seconds, what its variant run costs; ``rows``: the base's results.csv rows) and, with ``extend``, the
    cells of ``extension_runs`` at the cost of their base and variant runs (``extension_seconds``) with
    ∂L/∂φ from the base law there (an extrapolation)."""
    from loopscale.pairs.effects import phi_slope_at

    table, slope, ext = plan.table, phi_slope_at(plan.fit, plan.table), np.zeros(len(plan.table), bool)
    if extend:
        runs = extension_runs(plan)
        new = _table(runs)
        table = _concat(table, new)
        slope = np.concatenate([slope, phi_slope_at(plan.fit, new)])
        cost = np.concatenate([cost, 2 * extension_seconds(rows, runs)])
        ext = np.concatenate([ext, np.ones(len(runs), bool)])
    keys = sorted({(int(r), float(w)) for r, w in zip(table.r, table.width)})
    cluster = np.array([keys.index((int(r), float(w))) for r, w in zip(table.r, table.width)])
    ref = float(np.exp(np.mean(np.log(plan.table.width))))
    return Candidates(table, slope, np.asarray(cost, float), ext, cluster, ref)


def with_extension(plan: PairPlan, c: Candidates, rows, restarts: int, seed: int) -> PairPlan:
    """``plan`` as it would stand once the extension cells among ``rows`` are trained and published with the
    base: the base law refitted on the base's runs and those cells, each at the law's own prediction times
    exp(ε), ε drawn (``seed``) with the sd of the base's own log residuals (their true losses are unknown;
    where the law holds there as well as on the base, this is the law's uncertainty the pairs would then
    read). The pairs' noise stays the base's."""
    import dataclasses

    from loopscale.fit.fitter import fit_law

    new = [int(i) for i in rows if c.extension[i]]
    if not new:
        return plan
    cells = c.table.subset(np.array(new))
    spread = float(np.std(np.log(plan.table.loss / plan.fit.predict_table(plan.table)), ddof=1))
    draw = np.random.default_rng(seed + 51).normal(0.0, spread, len(new))
    cells = dataclasses.replace(cells, loss=plan.fit.predict_table(cells) * np.exp(draw))
    table = _concat(plan.table, cells)
    return dataclasses.replace(plan, table=table, fit=fit_law(table, restarts=restarts, seed=seed))


def _table(runs: list[PlannedRun]) -> RunTable:
    """Planned runs as a RunTable (loss NaN: not trained)."""

    def col(f, dtype=float):
        return np.array([f(run) for run in runs], dtype=dtype)

    return RunTable(
        run=col(lambda u: u.name, object), r=col(lambda u: u.r, int), n_once=col(lambda u: u.n_once),
        n_rec=col(lambda u: u.n_rec), tokens=col(lambda u: u.tokens), loss=np.full(len(runs), math.nan),
        budget=col(lambda u: u.budget), width=col(lambda u: u.width), seed=col(lambda u: u.seed),
        bptt_k=col(lambda u: u.model.effective_bptt_k),
    )  # fmt: skip


def _concat(a: RunTable, b: RunTable) -> RunTable:
    names = ("run", "r", "n_once", "n_rec", "tokens", "loss", "budget", "width", "seed", "bptt_k")
    return RunTable(**{k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in names})
