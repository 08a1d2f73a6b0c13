"""The candidate space of a design: every run it may use, one per (budget, width, r) of a reference sweep's
group (and one seed), with the planner's exact accounting; in sequential mode also the runs a partial sweep
already holds (fixed)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import replace as dc_replace

import numpy as np

from loopscale.config import replace
from loopscale.errors import UserError
from loopscale.fit.table import RunTable, load_table
from loopscale.sweep.plan import PlannedRun, plan_sweep
from loopscale.sweep.spec import BudgetWidths, RunGroup, SweepSpec


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
    beta_held: bool = False,
) -> Candidates:
    """The candidate space of a reference sweep's group: its budgets × its widths per budget × its r,
    optionally restricted to ``budgets`` and ``rs`` or with ``widths`` (d_model) at every budget. One
    budget is refused unless ``beta_held`` (``design --hold beta``: β is then not fitted).

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
    if len(grid) < 2 and not beta_held:
        raise UserError(
            "a design needs at least two budgets (beta is unidentifiable at one), or beta held (--hold beta)"
        )
    # replace re-validates the group and each of its cells (a NaN/inf or non-positive budget, a repeated
    # width) before the planner names runs after them
    group_spec = replace(
        base, rs=chosen_rs, grid=grid, model=dict(base.model), train=dict(base.train), seeds=None
    )
    cand_spec = replace(spec, groups=[group_spec], seeds=[0])
    runs = plan_sweep(cand_spec)
    return Candidates(runs=runs, spec=spec, group=group_spec, fixed=np.zeros(len(runs), bool))


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
