"""Issue 13's goal study for ``loopscale design`` (not a test): predicted vs realised φ CI widths per FLOP.

Candidate space: the paper's six budgets and §5.2 widths per budget, r ∈ {1, 2, 4, 8}; prior: the published
joint law with σ = 0.01 nats. Designs simulated:

- the paper grid (116 runs), and the simple subsets "without the top budget" and "r ∈ {1, 8} only";
- for each constraint family (r_min and r_max at every included budget, or r_min only) and replicates 1 and 2,
  the Pareto front of ``greedy_path`` + ``pruning_path`` (predicted by the sandwich covariance), sampled at
  FLOP fractions ``--fractions`` of the paper grid (the narrowest predicted design under each fraction).

Each design is simulated ``--seeds`` times (``design.simulate``: ``fit_law`` + ``bootstrap_fit``) with
the settings printed in the output. Writes ``OUT/study.json`` and the figures ``OUT/pareto.png`` (realised
φ CI width vs FLOPs) and ``OUT/calibration.png`` (realised vs predicted).

    nice -n 15 python benchmarks/design_study.py --seeds 20 --workers 2 --out results/design
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from loopscale import design as d
from loopscale.io import atomic_write_json
from loopscale.present.design_text import problem_text
from loopscale.sweep import preset


def space(all_widths: bool) -> tuple[d.Prior, d.Candidates, d.Information]:
    """The paper prior and candidates: §5.2 widths per budget, or (``all_widths``) all of them everywhere."""
    prior = d.load_prior("paper")
    spec = preset("paper")
    widths = sorted({w for cell in spec.groups[0].grid for w in cell.widths}) if all_widths else None
    cands = d.candidates_from_spec(spec, widths=widths)
    return prior, cands, d.Information.build(prior, cands)


def designs(fractions: list[float]) -> list[dict]:
    _, cands, info = space(False)
    total = float(cands.flops.sum())
    top = cands.budget.max()
    out = []

    def add(
        label: str,
        family: str,
        design: d.RunDesign,
        constraints: d.Constraints | None,
        all_widths: bool = False,
    ) -> None:
        weights = design.weights(len(cands.runs))
        problems = d.check_design(cands, info, design, constraints or d.Constraints())
        out.append(
            {
                "label": label,
                "family": family,
                "idx": design.idx.tolist(),
                "replicates": design.replicates,
                "flops": design.flops(cands),
                "fraction": design.flops(cands) / total,
                "runs": int(len(design.idx) * design.replicates),
                "predicted": info.ci_widths(weights),
                "constraint_problems": [problem_text(p) for p in problems],
                "all_widths": all_widths,
            }
        )

    add("paper grid", "reference", d.RunDesign(np.arange(len(cands.runs))), None)
    add("without top budget", "subset", d.RunDesign(np.flatnonzero(cands.budget < top)), None)
    add("r in {1, 8} only", "subset", d.RunDesign(np.flatnonzero(np.isin(cands.r, [1, 8]))), None)
    for per_budget in ("ends", "min"):
        constraints = d.Constraints(per_budget=per_budget)
        for replicates in (1, 2):
            points = [
                p
                for search in (d.greedy_path, d.pruning_path)
                for p in search(cands, info, constraints, replicates=replicates)
            ]
            front = d.pareto(points)
            chosen = {}
            for frac in fractions:
                ok = [p for p in front if p.flops <= frac * total]
                if ok:
                    best = min(ok, key=lambda p: p.predicted["phi"])
                    chosen[tuple(best.design.idx.tolist())] = best
            for p in sorted(chosen.values(), key=lambda p: p.flops):
                add(
                    f"{per_budget}, x{replicates}, {p.flops / total:.0%}",
                    f"{per_budget} x{replicates}",
                    p.design,
                    constraints,
                )
    # every §5.2 width at every budget: wide windows far from the minimum (the law must hold off-optimum)
    _, cands, info = space(True)
    front = d.pareto(
        [p for search in (d.greedy_path, d.pruning_path) for p in search(cands, info, d.Constraints())]
    )
    for frac in (0.25, 0.3, 0.4):
        best = min((p for p in front if p.flops <= frac * total), key=lambda p: p.predicted["phi"])
        add(
            f"all widths, x1, {best.flops / total:.0%}",
            "ends x1 all widths",
            best.design,
            d.Constraints(),
            True,
        )
    return out


def _simulate(args: tuple) -> dict:
    row, seeds, settings = args
    prior, cands, info = space(row["all_widths"])
    design = d.RunDesign(np.array(row["idx"]), row["replicates"])
    start = time.perf_counter()
    real = d.simulate(cands, info, prior, design, seeds, **settings)
    phis = np.array([s["phi"] for s in real.per_seed])
    return {
        **row,
        "realised": real.to_dict(),
        "phi_sd": float(phis.std(ddof=1)) if len(phis) > 1 else None,
        "seconds": time.perf_counter() - start,
    }


def power_designs(delta: float) -> list[dict]:
    """Δφ designs: the cheapest on each family's front predicted to reach 80% power at ``delta``, and the
    case studies' shape (the four lower budgets of the paper grid, every r)."""
    _, cands, info = space(False)
    out = []
    for per_budget in ("ends", "min"):
        constraints = d.Constraints(per_budget=per_budget)
        front = d.pareto(
            [p for search in (d.greedy_path, d.pruning_path) for p in search(cands, info, constraints)]
        )
        best = d.cheapest_with_power(cands, info, front, delta)
        out.append({"label": f"cheapest 80% ({per_budget})", "idx": best.design.idx.tolist()})
    four = np.flatnonzero(cands.budget <= sorted(set(cands.budget.tolist()))[3])
    out.append({"label": "four lower budgets (case-study shape)", "idx": four.tolist()})
    shared = (cands.r == 1).astype(float)
    for row in out:
        idx = np.array(row["idx"])
        weights = d.RunDesign(idx).weights(len(cands.runs))
        row["se_predicted"] = d.delta_phi_se(info, weights, shared)
        row["power_predicted"] = d.power(delta, row["se_predicted"])
        row["flops_base"] = float(cands.flops[idx].sum())
        row["flops_variant"] = float(cands.flops[idx][cands.r[idx] > 1].sum())
        row["runs_base"] = int(len(idx))
        row["runs_variant"] = int((cands.r[idx] > 1).sum())
    return out


def _simulate_power(args: tuple) -> dict:
    row, delta, seeds, settings = args
    prior, cands, info = space(False)
    real = d.simulate_power(cands, info, prior, d.RunDesign(np.array(row["idx"])), delta, seeds, **settings)
    return {**row, "realised": real.to_dict()}


def figures(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = next(r for r in rows if r["family"] == "reference")
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    markers = {"ends x1": "o", "ends x2": "s", "min x1": "^", "min x2": "v", "ends x1 all widths": "D"}
    for family, marker in markers.items():
        fam = sorted((r for r in rows if r["family"] == family), key=lambda r: r["fraction"])
        if not fam:
            continue
        x = [r["fraction"] for r in fam]
        line = ax.plot(
            x, [r["realised"]["ci_width"]["phi"] for r in fam], marker=marker, label=f"{family} realised"
        )
        ax.plot(
            x,
            [r["predicted"]["phi"] for r in fam],
            marker=marker,
            ls=":",
            mfc="none",
            color=line[0].get_color(),
            label=f"{family} predicted",
        )
    for r in rows:
        if r["family"] in ("reference", "subset"):
            ax.scatter(
                r["fraction"], r["realised"]["ci_width"]["phi"], marker="*", s=160, color="k", zorder=5
            )
            ax.scatter(
                r["fraction"],
                r["predicted"]["phi"],
                marker="*",
                s=160,
                facecolor="none",
                edgecolor="k",
                zorder=5,
            )
            ax.annotate(
                r["label"],
                (r["fraction"], r["realised"]["ci_width"]["phi"]),
                textcoords="offset points",
                xytext=(5, -12),
                fontsize=8,
            )
    ax.axhline(ref["realised"]["ci_width"]["phi"], color="grey", lw=0.8, ls="--")
    ax.axvline(0.4, color="grey", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel("training FLOPs / paper grid's (7.26e20)")
    ax.set_ylabel("95% CI width of φ (median over seeds)")
    ax.set_title("designs from the published law, σ = 0.01 nats: realised (filled) vs predicted (hollow)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "pareto.png", dpi=130)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 4.5))
    pred = np.array([r["predicted"]["phi"] for r in rows])
    real = np.array([r["realised"]["ci_width"]["phi"] for r in rows])
    ax.scatter(pred, real, c=[r["fraction"] for r in rows], cmap="viridis")
    lim = [min(pred.min(), real.min()) * 0.9, max(pred.max(), real.max()) * 1.1]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot(lim, lim, "k-", lw=0.8)
    ax.plot(lim, [1.25 * v for v in lim], "k:", lw=0.8)
    ax.plot(lim, [0.75 * v for v in lim], "k:", lw=0.8)
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_xlabel("predicted φ CI width (sandwich, asymptotic)")
    ax.set_ylabel("realised φ CI width (bootstrap, median)")
    fig.tight_layout()
    fig.savefig(out / "calibration.png", dpi=130)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--restarts", type=int, default=60)
    p.add_argument("--bootstrap", type=int, default=200)
    p.add_argument("--bootstrap-restarts", type=int, default=3)
    p.add_argument("--fractions", type=float, nargs="+", default=[0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--limit", type=int, help="simulate only the first N designs (a smoke run)")
    p.add_argument("--power-seeds", type=int, default=0, help="simulated compare pairs per power design")
    p.add_argument("--delta-phi", type=float, default=0.1)
    p.add_argument("--figures-only", action="store_true", help="redraw the figures from OUT/study.json")
    p.add_argument("--out", type=Path, default=Path("results/design"))
    args = p.parse_args()
    if args.figures_only:
        figures(json.loads((args.out / "study.json").read_text())["designs"], args.out)
        return
    prior = d.load_prior("paper")
    rows = designs(args.fractions)[: args.limit]
    settings = {
        "restarts": args.restarts,
        "bootstrap": args.bootstrap,
        "bootstrap_restarts": args.bootstrap_restarts,
    }
    jobs = [(row, args.seeds, settings) for row in rows]
    start = time.perf_counter()
    done = []
    with ProcessPoolExecutor(args.workers) as pool:
        for r in pool.map(_simulate, jobs):
            done.append(r)
            real = r["realised"]
            width = real["ci_width"]["phi"]
            print(
                f"{r['label']:<24}{r['runs']:>5} runs {r['fraction']:7.1%}  "
                f"predicted {r['predicted']['phi']:.4f}  "
                f"realised {width:.4f} ({width / r['predicted']['phi']:.2f}x)  "
                f"3.92 sd(phi) {3.92 * (r['phi_sd'] or float('nan')):.4f}  coverage {real['coverage']:.0%}  "
                f"bound {real['phi_at_bound']:.1%}  "
                + ("ok" if not r["constraint_problems"] else "breaks constraints"),
                flush=True,
            )
    power_rows = []
    if args.power_seeds:
        power_jobs = [
            (row, args.delta_phi, args.power_seeds, settings) for row in power_designs(args.delta_phi)
        ]
        with ProcessPoolExecutor(args.workers) as pool:
            for r in pool.map(_simulate_power, power_jobs):
                power_rows.append(r)
                print(
                    f"power {r['label']:<38} runs {r['runs_base']}/{r['runs_variant']}  FLOPs "
                    f"{r['flops_base']:.3g}/{r['flops_variant']:.3g}  predicted SE {r['se_predicted']:.4f} "
                    f"power {r['power_predicted']:.2f}  realised power {r['realised']['power']:.2f} "
                    f"(median CI width {r['realised']['median_ci_width']:.3f}, {args.power_seeds} pairs)",
                    flush=True,
                )
    ref = next(r for r in done if r["family"] == "reference")
    goal = [
        r
        for r in done
        if r["fraction"] <= 0.4
        and not r["constraint_problems"]
        and r["realised"]["ci_width"]["phi"] <= ref["realised"]["ci_width"]["phi"]
    ]
    print(f"goal reached by {len(goal)} design(s): {[g['label'] for g in goal]}")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        args.out / "study.json",
        {
            "settings": {**settings, "seeds": args.seeds, "sigma": prior.sigma, "prior": prior.to_dict()},
            "seconds": time.perf_counter() - start,
            "designs": done,
            "power": power_rows,
            "power_settings": {"delta_phi": args.delta_phi, "pairs": args.power_seeds},
        },
    )
    figures(done, args.out)
    print(f"wrote {args.out}/study.json, pareto.png, calibration.png")


if __name__ == "__main__":
    main()
