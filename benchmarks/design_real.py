"""Check a design on real runs (not a test): the design's results table, assembled from a finished sweep of
the reference grid (the design's runs that grid already trained, identical configurations) and a sweep of
the design's remaining runs, fitted with the same settings as the reference's own fit; both fits side by side.

A design run counts as already trained when the reference sweep holds a finished run with the same budget,
width, r and seed (the design spec carries the reference's template, recipe, batch and data, which the script
checks). The table goes to ``OUT/results.csv``, the fit to ``OUT/fit.json`` (``loopscale fit`` with the
reference fit's restarts, bootstrap and seed), and the comparison is printed and written to
``OUT/comparison.json``.

    python benchmarks/design_real.py --design results/design/laptop-budgets13-gap2.yaml \\
        --reference results/laptop --extra results/laptop-design-check --out results/design/laptop-real
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
from pathlib import Path

from loopscale.cli import main as loopscale
from loopscale.fit.protocol import read_protocol
from loopscale.io import atomic_write_json, atomic_write_text
from loopscale.present.identification import identification_verdict
from loopscale.sweep import load_spec, plan_sweep
from loopscale.sweep.results import read_results

RECIPE_KEYS = ("batch_tokens", "model", "train", "seeds", "nproc")


def key(row) -> tuple[float, int, int, int]:
    return (float(row["budget"]), int(row["width"]), int(row["r"]), int(row["seed"]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--design", type=Path, required=True, help="the design's spec (loopscale design --out)")
    p.add_argument("--reference", type=Path, required=True, help="finished sweep of the reference grid")
    p.add_argument("--extra", type=Path, required=True, help="finished sweep of the remaining runs")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    design = load_spec(args.design)
    for folder in (args.reference, args.extra):
        other = load_spec(folder / "sweep.yaml")
        for name in RECIPE_KEYS:
            if getattr(other, name) != getattr(design, name):
                raise SystemExit(f"{folder}: its {name} differs from the design's; runs not comparable")
    rows = {}
    for folder in (args.reference, args.extra):
        with open(folder / "results.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                if row["status"] == "ok":
                    rows.setdefault(key(row), (folder, row))
    wanted = [(run.budget, run.width, run.r, run.seed) for run in plan_sweep(design)]
    missing = [k for k in wanted if k not in rows]
    if missing:
        raise SystemExit(f"{len(missing)} design run(s) not finished in either sweep, e.g. {missing[0]}")
    table = [rows[k][1] for k in wanted]
    args.out.mkdir(parents=True, exist_ok=True)
    columns = [c for c in table[0] if all(c in row for row in table)]  # eval columns only in one sweep
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    atomic_write_text(args.out / "results.csv", text.getvalue())
    read_results(args.out / "results.csv")  # the assembled table is a valid results table
    ref_fit = json.loads((args.reference / "fit.json").read_text())
    settings = ref_fit["settings"]
    code = loopscale(
        [
            "fit",
            str(args.out / "results.csv"),
            "--restarts",
            str(settings["restarts"]),
            "--bootstrap",
            str(settings["bootstrap"]),
            "--bootstrap-restarts",
            str(settings["bootstrap_restarts"]),
            "--seed",
            str(settings["seed"]),
            "--model-config",
            str(args.reference / "sweep.yaml"),
            "--json",
            str(args.out / "fit.json"),
        ]
    )
    if code != 0:
        return code
    fit = json.loads((args.out / "fit.json").read_text())
    times = {
        name: sum(float(r["wall_time_s"]) for r in tab if math.isfinite(float(r["wall_time_s"])))
        for name, tab in (("design", table), ("reference", read_results(args.reference / "results.csv")))
    }
    comparison = {
        name: {
            "runs": doc["fit"]["n_runs"],
            "phi": doc["fit"]["phi"],
            "ci_phi": doc["ci"]["phi"],
            "ci_width_phi": doc["ci"]["phi"][1] - doc["ci"]["phi"][0],
            "profile_phi": (doc.get("profile") or {}).get("interval"),
            "verdict": identification_verdict(read_protocol(doc).diagnostics),
            "unbracketed_cells": [(c["budget"], c["r"]) for c in doc["cell_minima"] if not c["bracketed"]],
            "run_seconds": times[name],
        }
        for name, doc in (("design", fit), ("reference", ref_fit))
    }
    atomic_write_json(args.out / "comparison.json", comparison)
    for name, row in comparison.items():
        lo, hi = row["ci_phi"]
        print(
            f"{name:>9}: {row['runs']} runs, summed run time {row['run_seconds'] / 3600:.2f} h, "
            f"phi {row['phi']:.3f} [{lo:.3f}, {hi:.3f}] (width {row['ci_width_phi']:.3f}), "
            f"unbracketed cells {row['unbracketed_cells'] or 'none'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
