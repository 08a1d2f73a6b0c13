"""How well a sweep used its machine (the report's Machine use section and the sweep's closing line):
training FLOPs over busy wall time against the machine's fp32 matmul peak, and the per-run overhead."""

from __future__ import annotations

import math
import os

from loopscale.report.document import Section


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


def throughput_text(use: dict) -> str | None:
    """What the sweep achieved against the machine's fp32 matmul peak (a ``machine_use`` dict), the one
    wording of the report's and the sweep's machine-use line; None without run timings."""
    if use["achieved_flops_per_s"] is None:
        return None
    achieved = f"{use['achieved_flops_per_s'] / 1e9:.1f} GFLOP/s"
    if use["utilisation"] is not None:
        return (
            f"{achieved} = {100 * use['utilisation']:.1f}% of the fp32 matmul peak of this machine "
            f"({use['peak_flops_per_s'] / 1e9:.0f} GFLOP/s, all cores)"
        )
    load = use["peak_load"]
    # a peak cached before loads were recorded carries none (an infinite load, null in fit.json)
    known = load["load_1min"] is not None and math.isfinite(load["load_1min"])
    shown = f"load {load['load_1min']:.1f} on {load['cores']} cores" if known else "load not recorded"
    return f"{achieved}; no utilisation: peak not measured on an idle machine ({shown})"


def machine_section(use: dict) -> Section:
    lines = [
        f"{use['runs']} finished runs, {use['flops']:.3g} training FLOPs, "
        f"{use['sum_run_wall_s'] / 3600:.2f} h of run processes (summed over runs)."
    ]
    if use["overhead_share"] is not None:
        lines.append(
            f"Per-run overhead (process start, dataset, model build, final evaluation, writes): "
            f"{100 * use['overhead_share']:.1f}% of the run processes' time."
        )
    throughput = throughput_text(use)
    if throughput is not None:
        lines.append(
            f"Busy wall time {use['busy_wall_s'] / 3600:.2f} h over {use['timed_runs']} timed runs: "
            f"{throughput}."
        )
    else:
        lines.append("Sweep utilisation: not available (the runs carry no start and finish times).")
    return Section("Machine use", lines)
