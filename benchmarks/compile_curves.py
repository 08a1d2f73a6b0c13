"""Does ``compile`` change what a run learns? The same short laptop-template run (d = 32, r = 4, seed 0 and 1)
trained eager and compiled, one thread each, as `loopscale sweep` runs them; prints, per step checkpoint,
the loss gap of compiled vs eager at one seed beside the gap between the two seeds (the seed noise), and
the final validation losses. Needs the laptop dataset (`loopscale data prepare --vocab 1024 --seq-len 128`).

    .venv/bin/python benchmarks/compile_curves.py --steps 200 --data data/packed/default-bpe1024-T128

Figures: benchmarks/RESULTS.md ("compile: auto").
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from loopscale.sweep.presets import _LAPTOP_MODEL, _LAPTOP_TRAIN


def run(out: Path, data: str, steps: int, seed: int, compile_: bool) -> tuple[list[float], float]:
    """Train one run into ``out``; its per-step training losses and final validation loss (nats)."""
    config = {
        **_LAPTOP_TRAIN,
        "data": {**_LAPTOP_TRAIN["data"], "path": data},
        "threads": 1,
        "compile": compile_,
        "seed": seed,
        "steps": steps,
        "batch_tokens": 2048,
        "model": {**_LAPTOP_MODEL, "width": 32, "r": 4},
    }
    out.mkdir(parents=True)
    (out / "run.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, "-m", "loopscale", "train", "--config", str(out / "run.yaml"),
                           "--out", str(out / "run")], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"training failed:\n{done.stderr[-2000:]}")
    losses = [json.loads(line)["loss"] for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    return losses, json.loads((out / "run" / "result.json").read_text())["val_loss"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--data", default="data/packed/default-bpe1024-T128")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {(mode, seed): run(Path(tmp) / f"{mode}{seed}", args.data, args.steps, seed,
                                  mode == "compiled")
                for seed in (0, 1) for mode in ("eager", "compiled")}

    def gap(a, b, upto):  # mean |Δ loss| over the 10 steps up to ``upto``
        return statistics.mean(abs(x - y) for x, y in zip(a[0][upto - 10:upto], b[0][upto - 10:upto],
                                                          strict=True))

    print("| steps | compiled vs eager, seed 0 | seed 1 | seed 0 vs seed 1, eager | compiled |")
    print("|---|---|---|---|---|")
    for upto in sorted({10, 25, 50, 100, args.steps} & set(range(10, args.steps + 1))):
        pairs = [(("compiled", 0), ("eager", 0)), (("compiled", 1), ("eager", 1)),
                 (("eager", 0), ("eager", 1)), (("compiled", 0), ("compiled", 1))]
        cells = [gap(runs[a], runs[b], upto) for a, b in pairs]
        print(f"| {upto - 9}–{upto} | " + " | ".join(f"{c:.1e}" for c in cells) + " |")
    val = {key: v[1] for key, v in runs.items()}
    print("validation loss (nats): " + ", ".join(f"{m} seed {s} {v:.5f}" for (m, s), v in val.items()))
    print(f"seed 1 − seed 0: eager {val['eager', 1] - val['eager', 0]:+.5f}, "
          f"compiled {val['compiled', 1] - val['compiled', 0]:+.5f}")


if __name__ == "__main__":
    main()
