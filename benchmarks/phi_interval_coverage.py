"""Coverage of the φ intervals on tables simulated from a fitted law (issue 19, docs/fitting.md).

Truth: the joint fit of a reference table (default results/laptop/results.csv, 72 runs). Each simulated
table keeps the reference's runs (sizes, tokens, budgets, widths) and draws losses from the true law plus

- ``structured``: a random effect per (r, width) shared across budgets (τ_rw), one per (budget, r) cell
  (τ_cell) and iid noise (σ), in nats: the shape of the laptop sweep's residuals (0.0244 / 0.0081 / 0.0202,
  shared/notes/laptop-law.md);
- ``iid``: iid noise σ only (default 0.010 nats).

Every table is fitted with the CLI's protocol pieces (best of ``--restarts`` starts) and each interval is
computed: the cell bootstrap (``bootstrap_fit``), the random-effects parametric bootstrap (``ci.phi``,
``random_effects_bootstrap``) and optionally the profile. Prints coverage of the true φ and median widths,
and writes them as JSON with ``--out``.

    python benchmarks/phi_interval_coverage.py --scenario structured --tables 40 \
        --out results/law-check/coverage-structured.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from loopscale.fit.bootstrap import bootstrap_fit, effect_groups, random_effects_bootstrap
from loopscale.fit.fitter import fit_law
from loopscale.fit.profile import profile_phi
from loopscale.fit.table import RunTable, load_table
from loopscale.io import atomic_write_json


def simulate(table: RunTable, truth_loss: np.ndarray, rng, tau_rw: float, tau_cell: float, sigma: float):
    groups = effect_groups(table)
    loss = truth_loss + rng.normal(0.0, sigma, len(table))
    for name, tau in (("r_width", tau_rw), ("cell", tau_cell)):
        if tau > 0:
            z = getattr(groups, name)
            loss = loss + z @ rng.normal(0.0, tau, z.shape[1])
    from dataclasses import replace

    return replace(table, loss=loss)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", default="results/laptop/results.csv")
    p.add_argument("--scenario", choices=["structured", "iid"], default="structured")
    p.add_argument("--tau-rw", type=float, default=0.0244)
    p.add_argument("--tau-cell", type=float, default=0.0081)
    p.add_argument("--sigma", type=float, help="iid noise in nats (default 0.0202 structured, 0.010 iid)")
    p.add_argument("--tables", type=int, default=40)
    p.add_argument("--resamples", type=int, default=200)
    p.add_argument("--restarts", type=int, default=200)
    p.add_argument("--profile", action="store_true", help="also the profile interval (slow)")
    p.add_argument(
        "--no-cell", dest="cell", action="store_false", help="skip the cell bootstrap (half the time)"
    )
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--out")
    args = p.parse_args()
    sigma = args.sigma if args.sigma is not None else (0.0202 if args.scenario == "structured" else 0.010)
    tau_rw, tau_cell = (args.tau_rw, args.tau_cell) if args.scenario == "structured" else (0.0, 0.0)
    reference = load_table(args.reference)
    truth = fit_law(reference, restarts=args.restarts)
    true_loss = truth.predict_table(reference)
    rows = []
    start = time.perf_counter()
    for k in range(args.tables):
        rng = np.random.default_rng(args.seed + k)
        table = simulate(reference, true_loss, rng, tau_rw, tau_cell, sigma)
        fit = fit_law(table, restarts=args.restarts, seed=k)
        row = {"table": k, "phi_hat": fit.phi}
        boot = random_effects_bootstrap(fit, table, resamples=args.resamples, seed=k)
        intervals = {"random_effects": boot.ci["phi"]}
        if args.cell:
            cell = bootstrap_fit(fit, table, resamples=args.resamples, seed=k)
            intervals["cell_bootstrap"] = cell.ci["phi"]
        if args.profile:
            intervals["profile"] = profile_phi(table, [fit], seed=k).interval
        for name, (lo, hi) in intervals.items():
            lo = -np.inf if lo is None else lo
            hi = np.inf if hi is None else hi
            row[name] = {"ci": [lo, hi], "covers": bool(lo <= truth.phi <= hi), "width": hi - lo}
        rows.append(row)
        covered = {name: sum(r[name]["covers"] for r in rows) for name in intervals}
        print(
            f"table {k + 1}/{args.tables} ({time.perf_counter() - start:.0f} s): phi_hat {fit.phi:.3f}  "
            + "  ".join(
                f"{n} {row[n]['ci'][0]:.3f}..{row[n]['ci'][1]:.3f} ({covered[n]}/{k + 1})" for n in intervals
            ),
            flush=True,
        )
    names = [n for n in rows[0] if isinstance(rows[0][n], dict)]
    summary = {
        "scenario": args.scenario,
        "reference": args.reference,
        "true_phi": truth.phi,
        "tau_rw": tau_rw,
        "tau_cell": tau_cell,
        "sigma": sigma,
        "tables": args.tables,
        "resamples": args.resamples,
        "restarts": args.restarts,
        "phi_hat_sd": float(np.std([r["phi_hat"] for r in rows], ddof=1)),
        "coverage": {n: sum(r[n]["covers"] for r in rows) for n in names},
        "median_width": {n: float(np.median([r[n]["width"] for r in rows])) for n in names},
        "rows": rows,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.out, summary)


if __name__ == "__main__":
    main()
