"""How fast a mistyped input path is answered (issue 20's goal: under 3 s on an idle machine; not a test).

Runs every command of ``tests/test_fast_fail.py`` (each with a missing input) as a user would, ``python -m
loopscale ARGV`` in a fresh interpreter and an empty working folder, and prints the wall seconds from start to
exit, the exit code and the error line. The load average is printed beside them: on a busy machine every
figure grows with it.

    python benchmarks/fast_fail.py [--repeat N]     # the median of N runs per command (default 3)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_fast_fail import COMMANDS  # noqa: E402 - the commands the test checks


def time_command(argv: tuple[str, ...]) -> tuple[float, int, str]:
    """(wall seconds, exit code, last stderr line) of ``python -m loopscale ARGV`` in an empty folder."""
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "loopscale", *argv], cwd=folder, capture_output=True, text=True
        )
        seconds = time.perf_counter() - start
    lines = proc.stderr.strip().splitlines()
    return seconds, proc.returncode, lines[-1] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per command; the median is printed")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; median of {args.repeat} run(s)")
    worst = 0.0
    for argv in COMMANDS:
        runs = [time_command(argv) for _ in range(args.repeat)]
        seconds = statistics.median(r[0] for r in runs)
        worst = max(worst, seconds)
        _, code, line = runs[-1]
        print(f"{seconds:6.2f} s  exit {code}  loopscale {' '.join(argv)}\n          {line[:150]}")
    print(f"slowest: {worst:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
