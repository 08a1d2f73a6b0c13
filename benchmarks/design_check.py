"""Re-simulate designs ``loopscale design`` chose or tried against the reference grid on many paired seeds
(not a test): the check of a search's answer that docs/design.md ("The `laptop` goal") reports.

Each design is named ``DOC.json:LABEL``: a row of that design document's ``simulation_rounds`` (its runs and
replicates). The reference grid (every run of the preset's group, its seeds) and each design are simulated on
the same seeds ``--seed`` … ``--seed + K − 1`` (``fit.design.simulate``, the CLI's default settings), so a
design's width can be compared seed by seed with the reference's: the median of the per-seed ratios and the
number of seeds on which the design is narrower. Wall shares are those of the document's own probe.

    nice -n 10 python benchmarks/design_check.py --preset laptop --prior results/laptop/results.csv \\
        --seeds 32 --out results/design/laptop-paired32.json \\
        results/design/laptop-wall.json:"pruning x2 #27" results/design/laptop-wall.json:"greedy x2 #8"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from loopscale.fit import design as d
from loopscale.io import atomic_write_json
from loopscale.sweep import preset


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("designs", nargs="+", metavar="DOC.json:LABEL")
    p.add_argument("--preset", default="laptop")
    p.add_argument("--prior", default="paper")
    p.add_argument("--seeds", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--widths", type=int, nargs="+",
                   help="the designs' candidate widths at every budget, as given to `loopscale design "
                        "--widths` (default: the preset's widths per budget)")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    prior = d.load_prior(args.prior)
    spec = preset(args.preset)
    cands = d.candidates_from_spec(spec)
    info = d.Information.build(prior, cands)
    total = float(cands.flops.sum() * len(spec.seeds))
    # a design's run indices point into the candidate space it was searched in
    design_cands = d.candidates_from_spec(spec, widths=args.widths) if args.widths else cands
    design_info = d.Information.build(prior, design_cands) if args.widths else info

    def run(label: str, design: d.RunDesign, extra: dict, cands=cands, info=info) -> dict:
        real = d.simulate(cands, info, prior, design, args.seeds, seed=args.seed)
        row = {
            "label": label,
            "runs": int(len(design.idx) * design.replicates),
            "flops_share": design.flops(cands) / total,
            "realised_phi": real.ci_width["phi"],
            "coverage": real.coverage,
            "widths": [r["width_phi"] for r in real.per_seed],
            **extra,
        }
        print(
            f"{label}: {row['runs']} runs, {row['flops_share']:.1%} FLOPs, "
            f"realised {row['realised_phi']:.4f}",
            flush=True,
        )
        return row

    ref = run("reference", d.RunDesign(np.arange(len(cands.runs)), len(spec.seeds)), {})
    rows = [ref]
    for name in args.designs:
        path, label = name.split(":", 1)
        doc = json.loads(Path(path).read_text())
        (found,) = [r for r in doc["simulation_rounds"] if r["design"] == label]
        wall = found.get("est_seconds")
        ref_wall = doc["reference_grid"]["est_seconds"]
        row = run(
            f"{label} ({path})",
            d.RunDesign(np.array(found["idx"], int), found["replicates"]),
            {"wall_share": None if wall is None or not ref_wall else wall / ref_wall},
            design_cands,
            design_info,
        )
        ratio = np.array(row["widths"]) / np.array(ref["widths"])
        row["paired_ratio_median"] = float(np.median(ratio))
        row["narrower_seeds"] = int(np.sum(ratio <= 1))
        rows.append(row)
    print("\n| design | runs | FLOPs | wall | realised phi CI | paired ratio | narrower on | coverage |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        wall = "-" if row.get("wall_share") is None else f"{row['wall_share']:.1%}"
        paired = f"{row['paired_ratio_median']:.3f}" if "paired_ratio_median" in row else "1"
        narrower = f"{row['narrower_seeds']}/{args.seeds}" if "narrower_seeds" in row else "-"
        print(
            f"| {row['label']} | {row['runs']} | {row['flops_share']:.1%} | {wall} | "
            f"{row['realised_phi']:.4f} | {paired} | {narrower} | "
            f"{row['coverage'] * args.seeds:.0f}/{args.seeds} |"
        )
    if args.out is not None:
        atomic_write_json(
            args.out, {"prior": prior.to_dict(), "seeds": args.seeds, "seed": args.seed, "rows": rows}
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
