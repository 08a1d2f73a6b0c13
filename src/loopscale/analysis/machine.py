"""How a sweep used the machine: its training FLOPs over its busy wall time against the machine's measured
fp32 matmul peak (``machine_use``; the report's machine section renders it)."""

from __future__ import annotations

import math
import os


def _union_seconds(spans: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals (seconds)."""
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def machine_use(rows: list[dict], peak_flops: float | None = None) -> dict:
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
    out: dict = {
        "runs": len(ok),
        "flops": float(sum(r["flops_per_token"] * r["tokens"] for r in ok)),
        "sum_run_wall_s": float(sum(walls)),
        "overhead_share": None,
        "timed_runs": len(timed),
        "busy_wall_s": None,
        "achieved_flops_per_s": None,
        "peak_flops_per_s": None,
        "peak_load": None,
        "utilisation": None,
    }
    if walls and all(math.isfinite(t) for t in trains):
        out["overhead_share"] = float(1 - sum(trains) / sum(walls))
    if timed:
        busy = _union_seconds([(r["started_at"], r["finished_at"]) for r in timed])
        flops = sum(r["flops_per_token"] * r["tokens"] for r in timed)
        out["busy_wall_s"] = busy
        out["achieved_flops_per_s"] = flops / busy if busy > 0 else None
        if out["achieved_flops_per_s"]:
            if peak_flops is None:
                import torch

                from loopscale.train.perf import peak_measurement

                torch.set_num_threads(os.cpu_count() or 1)
                peak = peak_measurement("cpu", "float32")  # the best idle probe here (re-measured daily)
                peak_flops = peak.flops
                if peak.busy:
                    out["peak_load"] = {"load_1min": peak.load.load_1min, "cores": peak.load.cores}
            out["peak_flops_per_s"] = float(peak_flops)
            if out["peak_load"] is None:
                out["utilisation"] = out["achieved_flops_per_s"] / peak_flops
    return out
