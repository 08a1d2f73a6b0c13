"""How a sweep used the machine: its training FLOPs over its busy wall time against the machine's measured
fp32 matmul peak (``machine_use``; the report's machine section renders it)."""

from __future__ import annotations

import math
import os

from loopscale.fit.protocol_results import MachineUse, PeakLoad


def _union_seconds(spans: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals (seconds)."""
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def machine_use(rows: list[dict], peak_flops: float | None = None) -> MachineUse:
    """How well the sweep used the machine: training FLOPs of the finished runs over their busy wall time
    (the union of the runs' process spans, which overlap when several workers run) against the machine's
    measured fp32 matmul peak, and the per-run overhead (process wall − training-loop time).

    ``peak_flops`` (FLOP/s): a given peak; None probes this machine (``train.perf.peak_measurement``). A
    peak probed while other work loaded the machine reads low, so no utilisation is computed from it:
    ``peak_load`` then records that load (``load_1min``, ``cores``) and ``utilisation`` stays None."""
    ok = [r for r in rows if r.get("status") == "ok"]
    timed = [
        r
        for r in ok
        if math.isfinite(r.get("started_at", math.nan)) and math.isfinite(r.get("finished_at", math.nan))
    ]
    walls = [r["wall_time_s"] for r in ok if math.isfinite(r.get("wall_time_s", math.nan))]
    trains = [r.get("train_time_s", math.nan) for r in ok if math.isfinite(r.get("wall_time_s", math.nan))]
    overhead = None
    if walls and all(math.isfinite(t) for t in trains):
        overhead = float(1 - sum(trains) / sum(walls))
    busy = achieved = load = utilisation = None
    if timed:
        busy = _union_seconds([(r["started_at"], r["finished_at"]) for r in timed])
        flops = sum(r["flops_per_token"] * r["tokens"] for r in timed)
        achieved = flops / busy if busy > 0 else None
        if achieved:
            if peak_flops is None:
                import torch

                from loopscale.train.perf import peak_measurement

                torch.set_num_threads(os.cpu_count() or 1)
                peak = peak_measurement("cpu", "float32")  # the best idle probe here (re-measured daily)
                peak_flops = peak.flops
                if peak.busy:
                    load = PeakLoad(load_1min=peak.load.load_1min, cores=peak.load.cores)
            peak_flops = float(peak_flops)
            if load is None:
                utilisation = achieved / peak_flops
    return MachineUse(
        runs=len(ok),
        flops=float(sum(r["flops_per_token"] * r["tokens"] for r in ok)),
        sum_run_wall_s=float(sum(walls)),
        overhead_share=overhead,
        timed_runs=len(timed),
        busy_wall_s=busy,
        achieved_flops_per_s=achieved,
        peak_flops_per_s=peak_flops if achieved else None,
        peak_load=load,
        utilisation=utilisation,
    )
