"""How well a sweep used its machine (the report's Machine use section and the sweep's closing line):
training FLOPs over busy wall time against the machine's fp32 matmul peak, and the per-run overhead."""

from __future__ import annotations

import math

from loopscale.fit.protocol_results import MachineUse
from loopscale.report.document import Section


def throughput_text(use: MachineUse) -> str | None:
    """What the sweep achieved against the machine's fp32 matmul peak, the one wording of the report's and
    the sweep's machine-use line; None without run timings."""
    if use.achieved_flops_per_s is None:
        return None
    achieved = f"{use.achieved_flops_per_s / 1e9:.1f} GFLOP/s"
    if use.utilisation is not None:
        return (
            f"{achieved} = {100 * use.utilisation:.1f}% of the fp32 matmul peak of this machine "
            f"({use.peak_flops_per_s / 1e9:.0f} GFLOP/s, all cores)"
        )
    load = use.peak_load
    # a peak cached before loads were recorded carries none (an infinite load, null in fit.json)
    known = load.load_1min is not None and math.isfinite(load.load_1min)
    shown = f"load {load.load_1min:.1f} on {load.cores} cores" if known else "load not recorded"
    return f"{achieved}; no utilisation: peak not measured on an idle machine ({shown})"


def machine_section(use: MachineUse) -> Section:
    lines = [
        f"{use.runs} finished runs, {use.flops:.3g} training FLOPs, "
        f"{use.sum_run_wall_s / 3600:.2f} h of run processes (summed over runs)."
    ]
    if use.overhead_share is not None:
        lines.append(
            f"Per-run overhead (process start, dataset, model build, final evaluation, writes): "
            f"{100 * use.overhead_share:.1f}% of the run processes' time."
        )
    throughput = throughput_text(use)
    if throughput is not None:
        lines.append(
            f"Busy wall time {use.busy_wall_s / 3600:.2f} h over {use.timed_runs} timed runs: {throughput}."
        )
    else:
        lines.append("Sweep utilisation: not available (the runs carry no start and finish times).")
    return Section("Machine use", lines)
