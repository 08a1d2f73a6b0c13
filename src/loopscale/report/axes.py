"""The downstream section (when ``loopscale eval-sweep`` ran): per (budget, r) cell the compute-optimal
checkpoint's per-axis continuation losses (nats), the gaps to r = 1, each axis's correlation with the
validation loss, the tasks behind each axis number, and the axes figure (method §10)."""

from __future__ import annotations

import math

from loopscale.fit.labels import flops_label
from loopscale.present.figures import axis_columns
from loopscale.report.document import Section, Table
from loopscale.sweep.results import NO_TASKS, SE_PREFIX, TASKS_PREFIX


def axes_section(rows: list[dict]) -> Section | None:
    """Per (budget, r) cell, the compute-optimal checkpoint (lowest validation loss in the cell, method §10.2)
    and its per-axis continuation losses (nats), as in the paper's headline downstream view."""
    axes = axis_columns(rows)
    if not axes:
        return None
    best: dict[tuple[float, int], dict] = {}
    for row in rows:
        if row["status"] != "ok":
            continue
        key = (row["budget"], row["r"])
        if key not in best or row["loss"] < best[key]["loss"]:
            best[key] = row

    def cell(value) -> str:
        return f"{value:.4f}" if isinstance(value, float) and math.isfinite(value) else "–"

    def with_se(row: dict, axis: str) -> str:
        se = row.get(SE_PREFIX + axis)
        value = cell(row.get(axis))
        known = value != "–" and isinstance(se, float) and math.isfinite(se)
        return f"{value} ± {se:.4f}" if known else value

    table = Table(
        ["C (FLOPs)", "r", "run", "val loss", *(a.removeprefix("axis_") for a in axes)],
        [
            [flops_label(budget), str(r), row["run"], cell(row["loss"]), *(with_se(row, a) for a in axes)]
            for (budget, r), row in sorted(best.items())
        ],
    )
    note = (
        "Per-axis continuation loss (nats per gold token; axis = mean of its tasks; ± its standard error "
        "over the sampled examples) of the compute-optimal run of each (budget, r) cell; – where a run was "
        "not evaluated."
    )
    title = "Downstream axes at the compute-optimal checkpoints"
    blocks = [note, table, *_axis_gaps(best, axes), *_axis_correlations(rows, axes), *axis_task_lists(rows)]
    return Section(title, blocks)


def _axis_gaps(best: dict[tuple[float, int], dict], axes: list[str]) -> list:
    """Per budget and looped r, each axis's loss minus r = 1's (compute-optimal checkpoints, nats) ± the
    standard error of the difference; a gap within two standard errors is marked as not resolved."""
    budgets = sorted({budget for budget, _ in best})
    looped = sorted({r for _, r in best if r != 1})
    body = []
    for budget in budgets:
        base = best.get((budget, 1))
        for r in looped:
            row = best.get((budget, r))
            if base is None or row is None:
                continue
            cells = []
            for axis in axes:
                a, b = row.get(axis), base.get(axis)
                sa, sb = row.get(SE_PREFIX + axis), base.get(SE_PREFIX + axis)
                if not all(isinstance(v, float) and math.isfinite(v) for v in (a, b, sa, sb)):
                    cells.append("–")
                    continue
                gap, se = a - b, math.hypot(sa, sb)
                cells.append(f"{gap:+.3f} ± {se:.3f}" + ("" if abs(gap) > 2 * se else " (not resolved)"))
            body.append([flops_label(budget), str(r), *cells])
    if not body:
        return []
    note = (
        "Gap to r = 1 at the same budget (axis loss of the looped model minus r = 1's, nats; positive = "
        'r = 1 better) ± the standard error of the difference; "not resolved" where it is within two '
        "standard errors (the paper: knowledge gaps grow with r, reading comprehension and compositional "
        "symbolic close them, reasoning primitives unresolved; method §10.5). The standard error counts "
        "only the sampling of examples, not run-to-run variation (seed, width): an axis whose gaps "
        "change sign from one budget to the next, or that barely correlates with the validation loss "
        "(below), varies more between runs than this ± says, and its gaps are not findings."
    )
    return [note, Table(["C (FLOPs)", "r", *(a.removeprefix("axis_") for a in axes)], body)]


def _axis_correlations(rows: list[dict], axes: list[str]) -> list:
    """Pearson correlation of each axis loss (and of their mean) with the validation loss over every
    evaluated run: the paper's check that continuation loss tracks validation loss (+0.983 for the
    macro average, method §10.1)."""
    import statistics

    def finite(value) -> bool:
        return isinstance(value, float) and math.isfinite(value)

    ok = [row for row in rows if row["status"] == "ok" and finite(row["loss"])]
    measured = [a for a in axes if any(finite(row.get(a)) for row in ok)]  # e.g. not an axis without data
    series = {
        a.removeprefix("axis_"): [(row["loss"], row[a]) for row in ok if finite(row.get(a))] for a in measured
    }
    series["macro (mean of axes)"] = [
        (row["loss"], sum(row[a] for a in measured) / len(measured))
        for row in ok
        if measured and all(finite(row.get(a)) for a in measured)
    ]

    def pearson(pairs) -> str:
        try:
            return f"{statistics.correlation(*zip(*pairs)):+.3f}"
        except statistics.StatisticsError:  # one of the two is constant
            return "–"

    body = [[name, pearson(pairs), str(len(pairs))] for name, pairs in series.items() if len(pairs) >= 3]
    if not body:
        return []
    note = (
        "Pearson correlation with the validation loss over every evaluated run (the paper: +0.983 for "
        "the macro continuation loss). A low value says the axis measures something the validation "
        "loss does not, or that its tasks are too noisy at this scale (see the ± in the table above)."
    )
    return [note, Table(["axis", "Pearson r with val loss", "runs"], body)]


def axis_task_lists(rows: list[dict]) -> list:
    """Which tasks each axis number averages (the ``tasks_<axis>`` columns of collect), which of them hold
    other data than the paper's (``*``), and which of the paper's tasks of that axis had none."""
    from loopscale.eval.axes import AXES

    lists: dict[tuple[str, str], int] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith(TASKS_PREFIX) and row["status"] == "ok" and isinstance(value, str):
                axis = key.removeprefix(TASKS_PREFIX)
                lists[(axis, value)] = lists.get((axis, value), 0) + 1
    if not lists:
        return []
    body = []
    for (axis, tasks), runs in sorted(lists.items()):
        names = set() if tasks == NO_TASKS else {t.rstrip("*") for t in tasks.split()}
        missing = [t for t in AXES.get(axis, ()) if t not in names]
        body.append([axis, tasks if names else "–", ", ".join(missing) or "none", str(runs)])
    table = Table(["axis", "tasks evaluated", "paper tasks without data", "runs"], body)
    note = (
        "The tasks behind each axis number. * marks data that differ from the paper's (a subset, another "
        "copy or a generated stand-in; `loopscale eval prepare` lists how); an axis is comparable across "
        "runs only with the same task list."
    )
    return [note, table]
