"""What the design step hands on: the chosen runs as a sweep spec that ``loopscale sweep`` runs as it is (or,
sequential mode, as new groups appended to a partial sweep's spec), and the design document's rows (runs,
training FLOPs, estimated wall seconds, predicted and realised 95% CI widths); ``present.design_text`` words
the document."""

from __future__ import annotations

import numpy as np

from loopscale.config import replace
from loopscale.design.candidates import Candidates
from loopscale.design.results import DesignRow, Realisation
from loopscale.design.search import PathPoint, RunDesign
from loopscale.design.simulation import agreement
from loopscale.errors import UserError
from loopscale.sweep.plan import plan_sweep
from loopscale.sweep.spec import BudgetWidths, RunGroup, SweepSpec


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
        # replace re-validates the group and its cells, as a spec's loader does
        groups.append(
            replace(
                base,
                name=label,
                rs=list(rs),
                grid=cells,
                model=dict(base.model),
                train=dict(base.train),
                seeds=None,
            )
        )
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


def summary_row(
    point: PathPoint,
    cands: Candidates,
    seconds: float | None,
    realised: Realisation | None,
    *,
    new_only: bool,
) -> DesignRow:
    """One row of the side-by-side table; ``new_only``: count only the runs not already in a partial sweep."""
    new = point.design.idx[~cands.fixed[point.design.idx]] if new_only else point.design.idx
    return DesignRow(
        label=point.design.label or point.step,
        runs=int(len(new) * point.design.replicates),
        replicates=point.design.replicates,
        flops=point.flops,
        est_seconds=seconds,
        predicted_ci=point.predicted,
        cells=tuple(
            sorted(
                {
                    (float(b), int(r))
                    for b, r in zip(cands.budget[point.design.idx], cands.r[point.design.idx])
                }
            )
        ),
        realised=realised,
        agreement=None if realised is None else agreement(point.predicted["phi"], realised.ci_width["phi"]),
    )
