"""Hardware performance helpers: the matmul peak FLOP/s (for MFU) and the tcmalloc preload.

Importing this module does not import torch (the CLI uses ``tcmalloc_library`` before torch loads).
"""

from __future__ import annotations

import glob
import json
import math
import os
import time
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


PEAK_MAX_AGE_S = 24 * 3600  # a cached peak older than this is measured again
PEAK_CACHE_FILE = "peak_flops_v2.json"


def peak_flops(device: str, dtype_name: str, now: float | None = None) -> float:
    """The matmul peak FLOP/s of this machine, cached per device/dtype/thread count.

    A probe taken while other jobs load the machine reads low, and a low peak inflates every MFU after it.
    So the cache keeps the best value seen and re-measures once its last measurement is older than
    ``PEAK_MAX_AGE_S``: load can only lower a measurement, never raise it.
    """
    import torch

    if device.startswith("cuda"):
        key = f"{torch.cuda.get_device_name(device)}|{dtype_name}"
    else:
        key = f"cpu|{os.cpu_count()}cpus|{torch.get_num_threads()}threads|{dtype_name}"
    # v2 entries are {"flops", "measured_at"}; a new file name, because loopscale versions that read bare
    # numbers from peak_flops.json may share this cache folder (a sweep running an older checkout crashed
    # on the new format)
    cache = Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "loopscale")) / PEAK_CACHE_FILE
    now = time.time() if now is None else now
    try:
        table = json.loads(cache.read_text())
    except (OSError, ValueError):
        table = {}
    entry = table.get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("flops"), (int, float)):
        entry = {"flops": 0.0, "measured_at": -math.inf}  # absent or unreadable: measure
    if now - entry["measured_at"] > PEAK_MAX_AGE_S or entry["flops"] <= 0:
        entry = {"flops": max(entry["flops"], measure_matmul_peak(device, dtype_name)), "measured_at": now}
        table[key] = entry
        try:
            atomic_write_json(cache, table)
        except OSError:
            pass  # a read-only home only costs a re-measurement next time
    return float(entry["flops"])
