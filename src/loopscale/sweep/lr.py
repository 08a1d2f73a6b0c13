"""Learning rate at a new scale: re-anchor the transfer rules, find the base-LR multiplier by a short sweep.

The paper's LRs were tuned at d = 640, B = 2^18 tokens, D/N ≈ 10 (method §7.6) and moved to other widths,
batches and token counts by the transfer rules of method §7.3. Far from that reference (a 2-core laptop at
d ≈ 32–96, B ≈ 2–4K tokens) the rules extrapolate over two orders of magnitude and the transferred LR can
be off by a constant factor (the laptop pilot found ≈ 2× too low). The remedy is the paper's own: re-anchor
the rules at a small reference (``optim.ref_width``, ``optim.ref_batch_tokens``) and sweep one multiplier
m on every base LR (MuonH and AdamW groups alike) at a few widths and at r = 1 and a looped r, at one
budget; keep the multiplier that minimises the mean loss over those configurations, and record it.

``lr_sweep_spec`` turns a base sweep (preset or YAML) into that calibration sweep: one group per multiplier
(``m0.5``, ``m1``, ``m2`` …) whose ``train.optim`` scales every base LR by m. It runs with the ordinary
sweep machinery (``loopscale lr-sweep``: resumable, local or SLURM). ``calibrate`` reads its results table
and returns the shared multiplier, whether the multipliers run bracket it, each configuration's own best
multiplier and its regret at the shared one.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from loopscale.config import from_dict
from loopscale.errors import UserError
from loopscale.sweep.spec import BudgetWidths, RunGroup, SweepSpec
from loopscale.train.config import LR_KEYS, OptimConfig

CALIBRATION_FILE = "lr_calibration.json"
FINE_GRID = 401  # points of the interpolated mean-loss curve between the smallest and largest multiplier


def group_name(multiplier: float) -> str:
    return f"m{multiplier:g}"


def base_optim(spec: SweepSpec) -> OptimConfig:
    """The sweep's recipe (its ``train.optim`` over the defaults), validated."""
    return from_dict(OptimConfig, dict((spec.train or {}).get("optim") or {}), f"sweep {spec.name!r}: optim")


def lr_sweep_spec(
    base: SweepSpec,
    *,
    budget: float,
    widths: list[int],
    rs: list[int],
    multipliers: list[float],
    ref_width: int | None = None,
    ref_batch_tokens: int | None = None,
    name: str | None = None,
) -> SweepSpec:
    """The calibration sweep: ``base``'s template and recipe, one group per multiplier at one ``budget``.

    ``ref_width`` / ``ref_batch_tokens`` re-anchor the transfer rules (default: the base recipe's).
    """
    if not multipliers or any(not (m > 0 and math.isfinite(m)) for m in multipliers):
        raise UserError(f"multipliers must be positive finite numbers, got {multipliers}")
    if len(set(multipliers)) != len(multipliers):
        raise UserError(f"multipliers must be distinct, got {multipliers}")
    if len(multipliers) < 3:
        raise UserError("give at least 3 multipliers (a minimum needs a point on each side)")
    optim = base_optim(base)
    anchor: dict[str, Any] = {}
    if ref_width is not None:
        anchor["ref_width"] = ref_width
    if ref_batch_tokens is not None:
        anchor["ref_batch_tokens"] = ref_batch_tokens
    groups = []
    for m in sorted(multipliers):
        scaled = {key: getattr(optim, key) * m for key in LR_KEYS}
        groups.append(
            RunGroup(
                name=group_name(m),
                rs=list(rs),
                grid=[BudgetWidths(budget=float(budget), widths=list(widths))],
                train={"optim": {**anchor, **scaled}},
            )
        )
    train = dict(base.train or {})
    train["optim"] = {**dict(train.get("optim") or {}), **anchor}
    spec = replace(base, name=name or f"{base.name}-lr", groups=groups, train=train, seeds=[base.seeds[0]])
    spec.validate()
    for group in spec.groups:
        group.validate()
    return spec


def _multiplier(group: str) -> float:
    if not group.startswith("m"):
        raise UserError(f"run group {group!r} is not an LR-sweep group (m<multiplier>)")
    return float(group[1:])


def calibrate(rows: list[dict], base: OptimConfig | None = None) -> dict[str, Any]:
    """The shared LR multiplier from a calibration sweep's results rows (``collect`` output).

    Each (width, r) configuration's loss is interpolated in log m (a parabola through its three points
    nearest its own minimum; linear between points where it has fewer than three); the shared multiplier
    minimises the mean interpolated loss over configurations that finished at every multiplier. Returns
    a JSON-ready dict; ``bracketed`` is False when the shared minimum lies at the smallest or largest
    multiplier run (then the sweep must be extended before the value means anything).
    """
    ok = [r for r in rows if r.get("status") == "ok" and r.get("loss") not in (None, "")]
    if not ok:
        raise UserError("no finished runs in the LR sweep; run it first (loopscale lr-sweep … resumes)")
    configs: dict[tuple[int, int], dict[float, float]] = {}
    for row in ok:
        key = (int(row["width"]), int(row["r"]))
        configs.setdefault(key, {})[_multiplier(str(row["group"]))] = float(row["loss"])
    multipliers = sorted({m for losses in configs.values() for m in losses})
    complete = {k: v for k, v in configs.items() if sorted(v) == multipliers}
    if not complete:
        raise UserError("no (width, r) configuration finished at every multiplier; resume the LR sweep")
    log_grid = np.linspace(math.log(multipliers[0]), math.log(multipliers[-1]), FINE_GRID)
    curves = {k: _interpolate(v, log_grid) for k, v in complete.items()}
    mean_curve = np.mean(list(curves.values()), axis=0)
    best = int(np.argmin(mean_curve))
    shared = float(math.exp(log_grid[best]))
    bracketed = 0 < best < FINE_GRID - 1
    per_config = []
    for (width, r), losses in sorted(complete.items()):
        curve = curves[(width, r)]
        own = int(np.argmin(curve))
        per_config.append(
            {
                "width": width,
                "r": r,
                "losses": {f"{m:g}": losses[m] for m in multipliers},
                "best_multiplier": float(math.exp(log_grid[own])),
                "regret_at_shared": float(curve[best] - curve[own]),
            }
        )
    out: dict[str, Any] = {
        "multipliers": multipliers,
        "shared_multiplier": shared,
        "bracketed": bracketed,
        "mean_loss_at_shared": float(mean_curve[best]),
        "configs": per_config,
        "incomplete": [f"d={w} r={r}" for (w, r) in sorted(set(configs) - set(complete))],
    }
    if base is not None:
        out["recommended_optim"] = {
            "ref_width": base.ref_width,
            "ref_batch_tokens": base.ref_batch_tokens,
            **{key: getattr(base, key) * shared for key in LR_KEYS},
        }
    return out


def _interpolate(losses: dict[float, float], log_grid: np.ndarray) -> np.ndarray:
    """Loss over ``log_grid`` (log m): a parabola through the 3 points around the config's own minimum
    when it opens upward, linear interpolation elsewhere (the curve is only used to locate a minimum)."""
    ms = sorted(losses)
    x = np.log(ms)
    y = np.array([losses[m] for m in ms])
    curve = np.interp(log_grid, x, y)
    i = int(np.argmin(y))
    if len(ms) >= 3:
        lo = min(max(i - 1, 0), len(ms) - 3)
        a, b, c = np.polyfit(x[lo : lo + 3], y[lo : lo + 3], 2)
        if a > 0:
            inside = (log_grid >= x[lo]) & (log_grid <= x[lo + 2])
            curve[inside] = (a * log_grid**2 + b * log_grid + c)[inside]
    return curve


def format_calibration(result: dict[str, Any]) -> str:
    """A readable table: loss per (width, r) and multiplier, each config's best m, the shared m."""
    ms = result["multipliers"]
    head = f"{'width':>6}{'r':>3}" + "".join(f"{'m=' + format(m, 'g'):>9}" for m in ms)
    lines = ["validation loss (nats) by LR multiplier", head + f"{'best m':>9}{'regret':>9}"]
    for c in result["configs"]:
        cells = "".join(f"{c['losses'][format(m, 'g')]:9.4f}" for m in ms)
        lines.append(
            f"{c['width']:>6}{c['r']:>3}{cells}{c['best_multiplier']:9.3g}{c['regret_at_shared']:9.4f}"
        )
    verdict = (
        "inside the multipliers run"
        if result["bracketed"]
        else "AT THE EDGE of the multipliers run: extend the sweep before using it"
    )
    lines.append(f"shared multiplier m* = {result['shared_multiplier']:.3g} ({verdict})")
    if result.get("recommended_optim"):
        rec = result["recommended_optim"]
        lines.append("recommended optim: " + ", ".join(f"{k}: {v:.4g}" for k, v in rec.items()))
    if result["incomplete"]:
        lines.append("left out (not finished at every multiplier): " + ", ".join(result["incomplete"]))
    return "\n".join(lines)
