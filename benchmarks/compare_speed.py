"""How long does ``loopscale compare`` take on a 51-pair arm? (issue 41: ≤ 60 s on 2 cores, whatever the data)

Times the whole of ``compare`` (law checks of both arms, the shared-nuisance bootstrap with its growth, the
separate fits, per-budget Δφ, the matched-pair effect models and their simulations) on the two published
case-study arms, on an arm built from the published base with Δφ = −0.15 (the one whose shared bootstrap
grew to 6,400 resamples, 10 min 43 s, before the growth was capped) and on the three priced arms. Prints
seconds per arm and the ratio to the 60 s goal, measured in this run.

    python benchmarks/compare_speed.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loopscale.fit import load_table
from loopscale.pairs.effects import with_base_fit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from effect_attribution import variant_arm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 60.0
CLI = str(Path(sys.executable).parent / "loopscale")


def main() -> None:
    base_csv = ROOT / "results" / "laptop-factorial" / "results.csv"
    base = load_table(base_csv)
    with tempfile.TemporaryDirectory() as tmp:
        synthetic = Path(tmp) / "delta-phi-minus-0.15.csv"
        arm = variant_arm(base, with_base_fit(base, "e-per-r", 100, 0), {"delta_phi": -0.15}, 0.015, 0.005, 0)
        header = "run,budget,width,r,seed,n_once,n_rec,tokens,loss"
        rows = [header] + [
            f"{arm.run[i]},{arm.budget[i]},{arm.width[i]},{arm.r[i]},{arm.seed[i]},{arm.n_once[i]},"
            f"{arm.n_rec[i]},{arm.tokens[i]},{arm.loss[i]}"
            for i in range(len(arm))
        ]
        synthetic.write_text("\n".join(rows) + "\n")
        arms = {
            "laptop-hyperconnections": ROOT / "results" / "laptop-hyperconnections" / "results.csv",
            "laptop-truncated-bptt": ROOT / "results" / "laptop-truncated-bptt" / "results.csv",
            "delta phi -0.15 (synthetic)": synthetic,
            **{  # the priced arms (issue 41): their pairs only, up to 21
                name: ROOT / "results" / name / "results.csv"
                for name in ("laptop-parcae", "laptop-sampled-depth", "laptop-curriculum")
            },
        }
        for name, table in arms.items():
            start = time.perf_counter()
            done = subprocess.run(
                [CLI, "compare", str(base_csv), str(table), "--name", name],
                capture_output=True, text=True,
            )  # fmt: skip
            seconds = time.perf_counter() - start
            verdict = (done.stdout.splitlines() or [done.stderr.strip()])[0][:140]
            ratio = seconds / GOAL_S
            print(f"{name:30s} {seconds:6.1f} s = {ratio:.2f}x the 60 s goal (rc {done.returncode})")
            print(f"    {verdict}")


if __name__ == "__main__":
    main()
