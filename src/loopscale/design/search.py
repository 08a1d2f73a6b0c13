"""Searching designs: sets of candidate runs that keep the fit trustworthy, scored by Var(φ) per unit cost.

The constraints: every included (budget, r) cell has ≥ 3 widths whose predicted iso-FLOP minimum lies
inside them, by the fit's own ``parabola_minima`` on the prior's noise-free losses; the bottom and top budget
are always included; at each included budget the loop counts the constraints require. Two paths are scored by
Var(φ) per unit cost (training FLOPs, or each run's share of the planner's wall-time estimate): a greedy one
that adds cells, budgets and widths, and a pruning one that removes them from the largest design.
``bracket_search`` finds the cheapest design on a cost-ordered front that passes a (simulated) test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loopscale.design.candidates import Candidates
from loopscale.design.predict import Information
from loopscale.design.results import ConstraintProblem
from loopscale.errors import UserError
from loopscale.fit.analyses import parabola_minima


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


def _bracketing_windows(cands: Candidates, info: Information, min_widths: int = 3) -> dict:
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
                if row.bracketed:
                    windows[(lo, hi)] = idx
        out[key] = windows
    return out


def check_design(
    cands: Candidates, info: Information, design: RunDesign, constraints: Constraints
) -> list[ConstraintProblem]:
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
            problems.append(ConstraintProblem("end_budget_missing", float(end)))
    for lo, hi in constraints.gaps(sorted(set(cands.budget[chosen].tolist()))):
        problems.append(
            ConstraintProblem(
                "budget_gap", float(lo), budget_hi=float(hi), limit=constraints.max_budget_ratio
            )
        )
    for b in sorted(set(cands.budget[chosen].tolist())):
        have = sorted(set(cands.r[chosen & (cands.budget == b)].tolist()))
        need = constraints.required_rs(rs)
        lacking = sorted(set(need) - set(have))
        if lacking:
            problems.append(
                ConstraintProblem("budget_lacks_r", float(b), lacking=tuple(int(r) for r in lacking))
            )
    for b, r in sorted({(float(b), int(r)) for b, r in zip(cands.budget[chosen], cands.r[chosen])}):
        idx = np.flatnonzero(chosen & (cands.budget == b) & (cands.r == r))
        if len(idx) < constraints.min_widths:
            problems.append(
                ConstraintProblem("thin_cell", b, r=r, widths=len(idx), limit=float(constraints.min_widths))
            )
            continue
        (row,) = parabola_minima(cands.table(idx, info.loss[idx]))
        if not row.bracketed:
            problems.append(ConstraintProblem("not_bracketed", b, r=r, reason=row.reason))
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
        self.windows = _bracketing_windows(cands, info, constraints.min_widths)
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
    return abs(math.log(row.n_star) - 0.5 * (log_n.min() + log_n.max())) / (log_n.max() - log_n.min())


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
