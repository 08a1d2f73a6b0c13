"""Issue 11: a fresh local sweep given neither --workers nor --threads uses the measured default layout
(one single-threaded run per core for small CPU models), records it, and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .helpers import write_spec


def test_fresh_sweep_without_flags_records_the_default_layout(tiny_dataset, tmp_path):
    spec = write_spec(tmp_path, tiny_dataset, budget=2e8, rs=(1, 2))
    out = tmp_path / "sweep"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    proc = subprocess.run(
        [sys.executable, "-m", "loopscale", "sweep", str(spec), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    cores = os.cpu_count() or 1
    policy = json.loads((out / "executor.json").read_text())
    if cores > 1:
        assert policy == {"workers": 2, "threads": 1}  # two runs to do, widths ≤ 128, CPU
        assert "layout: 2 one-thread runs at once" in proc.stderr
    else:
        assert policy["workers"] == 1
