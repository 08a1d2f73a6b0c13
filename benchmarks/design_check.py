"""Re-simulate designs ``loopscale design`` chose or tried against the reference grid on many paired seeds
(not a test): the check of a search's answer that docs/design.md ("The `laptop` goal") reports.

Each design is named ``DOC.json:LABEL``: a row of that design document's ``simulation_rounds`` (its runs and
replicates), in the candidate space the document records (``candidate_space``; ``--budgets``/``--widths``
for documents written before it was recorded). The reference grid (every run of the preset's group, its
seeds) and each design are simulated on the same seeds ``--seed`` … ``--seed + K − 1``
(``design.simulate``, the CLI's default settings), so a design's width can be compared seed by seed with
the reference's: the median of the per-seed ratios and the number of seeds on which the design is narrower.

Two wall shares per design: the document's own probe (what the search minimised), and, with ``--measured
TABLE``, one read off the run times of a finished sweep of the reference (its results table, through
``sweep.plan.MeasuredTimes`` as ``loopscale design --timings`` reads it): every run, reference or design,
costs its steps × the median seconds per step that sweep measured at its (width, r), plus the median per-run
overhead (wall − train time), so budgets the sweep never ran are costed from the same measurements and the
share does not depend on a probe.

    nice -n 10 python benchmarks/design_check.py --preset laptop --prior results/laptop/results.csv \\
        --measured results/laptop/results.csv --seeds 32 --out results/design/laptop-paired32.json \\
        results/design/laptop-wall.json:"pruning x2 #27" results/design/laptop-wall.json:"greedy x2 #8"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from loopscale import design as d
from loopscale.io import atomic_write_json
from loopscale.sweep import preset
from loopscale.sweep.plan import MeasuredTimes


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("designs", nargs="+", metavar="DOC.json:LABEL")
    p.add_argument("--preset", default="laptop-staggered")
    p.add_argument("--prior", default="paper")
    p.add_argument("--seeds", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--budgets", type=float, nargs="+", help="candidate budgets of documents that do not record them"
    )
    p.add_argument(
        "--widths", type=int, nargs="+", help="candidate widths of documents that do not record them"
    )
    p.add_argument("--measured", type=Path, help="results table (.csv) of a finished sweep of the reference")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    prior = d.load_prior(args.prior)
    spec = preset(args.preset)
    cands = d.candidates_from_spec(spec)
    info = d.Information.build(prior, cands)
    total = float(cands.flops.sum() * len(spec.seeds))
    # ratios of summed run times: the worker count cancels
    seconds = MeasuredTimes.from_table(args.measured, workers=1).seconds if args.measured else None
    ref_measured = None if seconds is None else sum(seconds(run) for run in cands.runs) * len(spec.seeds)
    spaces: dict[str, tuple[d.Candidates, d.Information]] = {}

    def space(doc: dict) -> tuple[d.Candidates, d.Information]:
        """The candidate space a document's run indices point into."""
        given = doc.get("candidate_space") or {"budgets": args.budgets, "widths": args.widths}
        key = json.dumps(given, sort_keys=True)
        if key not in spaces:
            own = d.candidates_from_spec(spec, **{k: v for k, v in given.items() if v})
            spaces[key] = (own, d.Information.build(prior, own))
        return spaces[key]

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
        if seconds is not None:
            own = sum(seconds(cands.runs[i]) for i in design.idx) * design.replicates
            row["measured_wall_share"] = own / ref_measured
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
            *space(doc),
        )
        ratio = np.array(row["widths"]) / np.array(ref["widths"])
        row["paired_ratio_median"] = float(np.median(ratio))
        row["narrower_seeds"] = int(np.sum(ratio <= 1))
        rows.append(row)
    print(
        "\n| design | runs | FLOPs | wall (probe) | wall (measured) | realised phi CI | paired ratio "
        "| narrower on | coverage |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        wall = "-" if row.get("wall_share") is None else f"{row['wall_share']:.1%}"
        measured = "-" if "measured_wall_share" not in row else f"{row['measured_wall_share']:.1%}"
        paired = f"{row['paired_ratio_median']:.3f}" if "paired_ratio_median" in row else "1"
        narrower = f"{row['narrower_seeds']}/{args.seeds}" if "narrower_seeds" in row else "-"
        print(
            f"| {row['label']} | {row['runs']} | {row['flops_share']:.1%} | {wall} | {measured} | "
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
