"""Hardware performance helpers: the matmul peak FLOP/s (for MFU) and the tcmalloc preload.

Importing this module does not import torch (the CLI uses ``tcmalloc_library`` before torch loads).
"""

from __future__ import annotations

import glob
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from loopscale.io import atomic_write_json

TCMALLOC_GLOB = "/usr/lib/*/libtcmalloc_minimal.so.4"
NO_TCMALLOC_ENV = "LOOPSCALE_NO_TCMALLOC"  # set to 1 to keep glibc malloc
CACHE_ENV = "LOOPSCALE_CACHE"  # folder of the peak-FLOP/s cache (default ~/.cache/loopscale)


def tcmalloc_library() -> str | None:
    """Path of libtcmalloc_minimal.so.4 when installed and not disabled by $LOOPSCALE_NO_TCMALLOC."""
    if os.environ.get(NO_TCMALLOC_ENV, "") not in ("", "0"):
        return None
    found = sorted(glob.glob(TCMALLOC_GLOB))
    return found[0] if found else None


def tcmalloc_active() -> bool:
    """True when this process runs with tcmalloc preloaded."""
    return "tcmalloc" in os.environ.get("LD_PRELOAD", "")


def measure_matmul_peak(
    device: str = "cpu", dtype_name: str = "float32", size: int | None = None, repeats: int = 5
) -> float:
    """Best FLOP/s of a square ``size``×``size`` matmul (2·n³ FLOPs) on ``device`` over ``repeats`` runs."""
    import torch

    dtype = getattr(torch, dtype_name)
    n = size or (8192 if device.startswith("cuda") else 2048)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b  # warm-up
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


PEAK_MAX_AGE_S = 24 * 3600  # a cached peak older than this is measured again (on an idle machine)
PEAK_CACHE_FILE = "peak_flops_v2.json"
# The machine is busy when its 1-minute load average exceeds this many runnable processes per core: other
# work then takes a share of the cores that a probe, a run or a sweep counts on (plan, sweep, demo, train).
BUSY_LOAD_PER_CORE = 0.5


@dataclass(frozen=True)
class MachineLoad:
    """The 1-minute load average (runnable processes, ``os.getloadavg``; None where the OS has none) and
    the number of cores it is shared by."""

    load_1min: float | None
    cores: int

    @property
    def per_core(self) -> float | None:
        return None if self.load_1min is None else self.load_1min / self.cores

    @property
    def busy(self) -> bool:
        """True when other work loads more than ``BUSY_LOAD_PER_CORE`` of each core."""
        return self.per_core is not None and self.per_core > BUSY_LOAD_PER_CORE

    def note(self, consequence: str) -> str | None:
        """``machine busy: load X on N cores; CONSEQUENCE`` when busy, else None: the one wording of the
        hint for every command that measures or predicts speed."""
        if not self.busy:
            return None
        return f"machine busy: load {self.load_1min:.1f} on {self.cores} cores; {consequence}"


def machine_load() -> MachineLoad:
    """The load of this machine now."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return MachineLoad(load, os.cpu_count() or 1)


@dataclass(frozen=True)
class PeakFlops:
    """A matmul peak (FLOP/s) and the load under which it was measured. ``busy``: measured while other work
    loaded the machine (it reads low, so MFU computed with it reads high)."""

    flops: float
    load: MachineLoad

    @property
    def busy(self) -> bool:
        return self.load.busy


def _recorded_load(entry: dict) -> MachineLoad:
    """The load recorded beside a cache entry; an entry without one (written before loads were recorded)
    counts as measured under unknown, so possibly busy, load."""
    load, cores = entry.get("load_1min", math.inf), entry.get("cores")
    if (load is None or isinstance(load, (int, float))) and isinstance(cores, int) and cores > 0:
        return MachineLoad(load, cores)  # None: measured where the OS reports no load average
    return MachineLoad(math.inf, 1)


def peak_flops(device: str, dtype_name: str, now: float | None = None) -> float:
    """The matmul peak FLOP/s of this machine (``peak_measurement``'s value)."""
    return peak_measurement(device, dtype_name, now).flops


def peak_measurement(device: str, dtype_name: str, now: float | None = None) -> PeakFlops:
    """The matmul peak FLOP/s of this machine, cached per device/dtype/thread count with the load it was
    measured under.

    A probe taken while other jobs load the machine reads low, and a low peak inflates every MFU after it.
    The rule: a probe is cached as the peak only when the machine was idle (``MachineLoad.busy`` false just
    before it); the cache keeps the fastest idle probe, re-measured once older than ``PEAK_MAX_AGE_S``
    (load can only lower a measurement, never raise it). On a busy machine an idle value, even a stale
    one, is used as it is (no probe); without one the machine is probed and the value is kept as
    provisional (``busy`` recorded true): used, flagged busy, until the first probe on an idle machine
    replaces it. Entries written before loads were recorded count as provisional.
    """
    import torch

    if device.startswith("cuda"):
        key = f"{torch.cuda.get_device_name(device)}|{dtype_name}"
    else:
        key = f"cpu|{os.cpu_count()}cpus|{torch.get_num_threads()}threads|{dtype_name}"
    # v2 entries are {"flops", "measured_at", "load_1min", "cores"}; a new file name, because loopscale
    # versions that read bare numbers from peak_flops.json may share this cache folder (a sweep running an
    # older checkout crashed on the new format); versions that predate the load keys ignore them
    cache = Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "loopscale")) / PEAK_CACHE_FILE
    now = time.time() if now is None else now
    try:
        table = json.loads(cache.read_text())
    except (OSError, ValueError):
        table = {}
    entry = table.get(key)
    valid = (
        isinstance(entry, dict)
        and isinstance(entry.get("flops"), (int, float))
        and entry["flops"] > 0
        and isinstance(entry.get("measured_at"), (int, float))
    )
    if not valid:
        entry = None
    fresh = entry is not None and now - entry["measured_at"] <= PEAK_MAX_AGE_S
    idle_entry = entry if entry is not None and not _recorded_load(entry).busy else None
    if idle_entry is not None and fresh:
        return PeakFlops(float(entry["flops"]), _recorded_load(entry))
    load = machine_load()
    if load.busy and idle_entry is not None:
        return PeakFlops(float(entry["flops"]), _recorded_load(entry))  # stale, but better than a busy probe
    if load.busy and fresh:
        return PeakFlops(float(entry["flops"]), load)  # provisional: flagged busy, as the machine is now
    flops = measure_matmul_peak(device, dtype_name)
    kept = idle_entry if not load.busy else entry  # an idle probe never competes with a busy one
    if kept is not None and kept["flops"] > flops:
        flops, load = float(kept["flops"]), _recorded_load(kept) if not load.busy else load
    table[key] = {"flops": flops, "measured_at": now, "load_1min": load.load_1min, "cores": load.cores}
    try:
        atomic_write_json(cache, table)
    except OSError:
        pass  # a read-only home only costs a re-measurement next time
    return PeakFlops(flops, load)


# `compile: auto` (TrainConfig): torch.compile pays for itself when the run's training FLOPs would take at
# least this many seconds at the machine's matmul peak ("peak-seconds"). Break-even = compile seconds /
# (1/u_eager − 1/u_compiled), u the fraction of the peak each reaches; benchmarks/RESULTS.md ("compile: auto")
# has the measurements this is set from (laptop template, 1 thread, and the H200 figures).
COMPILE_BREAK_EVEN_PEAK_S = 30.0


def compile_pays(training_flops: float, peak: float) -> bool:
    """True when a run of ``training_flops`` FLOPs on a device of ``peak`` FLOP/s is long enough that
    compiling the model saves more time than the compile takes (``COMPILE_BREAK_EVEN_PEAK_S``)."""
    return training_flops / peak >= COMPILE_BREAK_EVEN_PEAK_S
