"""Speed and exactness of the fitter on the simulated paper grid (issue 3's benchmark; not a test).

Runs, on the 116-run grid of method §5.2 with losses from the published law plus σ = 0.010 nats of noise:

1. the full protocol (``run_protocol``): joint fit with 500 random starts, φ = 0 and φ = 1 fits, four per-r
   fits and two budget-half refits (500 starts each), and a 200-resample cell bootstrap whose refits start
   from the full-data optimum plus ``--bootstrap-restarts`` random starts;
2. the straightforward reference on a subset: SciPy L-BFGS-B (ftol 1e-15, gtol 1e-12) looped over
   ``--reference-starts`` random start points, no vectorisation; its time per start, multiplied by the
   protocol's number of starts (500 per fit, 500 per bootstrap refit), estimates the reference protocol;
3. the batched fitter from the same start points (same best objective, |Δ| ≤ 1e-10 required);
4. the warm-start check: the first ``--check-resamples`` bootstrap resamples refitted with 500 fresh random
   starts and no warm start, compared with the protocol's warm-started refits: the warm-started objective
   must never be higher, and with ``--full-bootstrap`` (all 200 resamples) the φ CIs must agree to 1e-6.

Prints measured seconds and ratios; exits 1 if an exactness check fails.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from loopscale.fit import load_table, run_protocol
from loopscale.fit.bootstrap import percentile_ci, resample_weights
from loopscale.fit.fitter import Box, design_for, fit_many, polish
from loopscale.fit.law import PHI, law_loss, objective_and_gradient
from loopscale.paper import JOINT_FIT, MAIN_GRID, grid_runs


def simulated_table(noise: float, seed: int):
    rng = np.random.default_rng(seed)
    runs = grid_runs(MAIN_GRID)
    for run in runs:
        run["loss"] = float(law_loss(JOINT_FIT, run["n_once"], run["n_rec"], run["r"], run["tokens"]))
        run["loss"] += noise * rng.standard_normal()
    return load_table(runs)


def scipy_reference(design, box, starts) -> tuple[float, float]:
    """Best objective of plain SciPy L-BFGS-B runs (``fitter.polish``) from each of ``starts``; seconds."""
    t0 = time.perf_counter()
    best = min(polish(design, x0, box.free)[1] for x0 in starts)
    return best, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--noise", type=float, default=0.010)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--restarts", type=int, default=500)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--bootstrap-restarts", type=int, default=20)
    ap.add_argument("--reference-starts", type=int, default=30)
    ap.add_argument("--check-resamples", type=int, default=10)
    ap.add_argument("--full-bootstrap", action="store_true", help="refit all resamples with full restarts")
    args = ap.parse_args()
    ok = True

    table = simulated_table(args.noise, args.seed)
    t0 = time.perf_counter()
    protocol = run_protocol(
        table,
        restarts=args.restarts,
        bootstrap=args.bootstrap,
        bootstrap_restarts=args.bootstrap_restarts,
        seed=args.seed,
    )
    t_protocol = time.perf_counter() - t0
    n_fits = len(protocol.forms) + len(protocol.per_r) + len(protocol.budget_halves)
    fit = protocol.fit
    print(
        f"full protocol: {t_protocol:.1f} s  ({n_fits} fits x {args.restarts} starts, {args.bootstrap} "
        f"bootstrap refits x (warm + {args.bootstrap_restarts}) starts)"
    )
    print(
        f"  joint fit: phi {fit.phi:.5f}  objective {fit.objective:.12e}  |grad| {fit.grad_norm:.1e}  "
        f"starts at optimum {fit.starts_at_optimum}/{args.restarts}  CI phi {protocol.ci['phi']}"
    )

    design, box = design_for(table, plain=False), Box.for_form(None)
    starts = box.starts(np.random.default_rng(12345), args.reference_starts)
    ref_best, t_ref = scipy_reference(design, box, starts)
    t1 = time.perf_counter()
    ours = fit_many(design, box, None, 0, np.random.default_rng(0), extra_starts=starts)[0]
    t_ours = time.perf_counter() - t1
    per_start = t_ref / args.reference_starts
    protocol_starts = args.restarts * (n_fits + args.bootstrap)
    estimate = per_start * protocol_starts
    delta = abs(ours.objective - ref_best)
    same = delta <= 1e-10 and abs(fit.objective - min(ref_best, ours.objective)) <= 1e-10
    ok &= same
    print(
        f"reference (SciPy L-BFGS-B loop): {args.reference_starts} starts in {t_ref:.1f} s = "
        f"{per_start:.3f} s/start -> protocol estimate {protocol_starts} starts = {estimate:.0f} s "
        f"({estimate / 3600:.2f} h)"
    )
    print(
        f"  batched fitter, same {args.reference_starts} starts: {t_ours:.2f} s ({t_ref / t_ours:.0f}x); "
        f"best objective {ours.objective:.12e} vs reference {ref_best:.12e}: |delta| {delta:.1e}; "
        f"500-start fit {fit.objective:.12e} -> {'SAME' if same else 'DIFFERENT'}"
    )
    print(f"speed ratio, full protocol vs reference estimate: {estimate / t_protocol:.0f}x")

    m = args.bootstrap if args.full_bootstrap else min(args.check_resamples, args.bootstrap)
    weights = resample_weights(table, args.bootstrap, args.seed, joint=True)[:m]
    t2 = time.perf_counter()
    full = fit_many(
        design,
        box,
        weights,
        args.restarts,
        np.random.default_rng(args.seed + 2),
        polish_top=3,
        scipy_polish=False,
    )
    t_full = time.perf_counter() - t2
    samples = protocol.bootstrap["samples"]
    warm = np.column_stack([samples[k][:m] for k in ("a", "b", "e", "alpha", "beta", "phi")])
    warm_obj = objective_and_gradient(warm, design, weights)[0]
    full_obj = np.array([o.objective for o in full])
    full_phi = np.array([o.theta[PHI] for o in full])
    dphi = np.abs(warm[:, PHI] - full_phi)
    worse = (warm_obj - full_obj) / full_obj  # > 0: the warm-started refit missed a lower optimum
    i = int(np.argmax(dphi))
    print(
        f"warm-start check: {m} resamples refitted with {args.restarts} fresh starts and no warm start "
        f"({t_full:.1f} s): max |phi_warm - phi_full| = {dphi.max():.1e} (resample {i}: objectives "
        f"{warm_obj[i]:.15e} warm vs {full_obj[i]:.15e} full); warm objective worse by at most "
        f"{max(worse.max(), 0):.1e} (relative); {int((dphi > 1e-6).sum())} resample(s) with |dphi| > 1e-6"
    )
    ok &= bool(worse.max() <= 1e-9)
    ci_warm, ci_full = percentile_ci(warm[:, PHI]), percentile_ci(full_phi)
    print(f"  95% CI phi: warm {ci_warm} vs full restarts {ci_full}")
    if args.full_bootstrap:
        ok &= bool(np.abs(np.subtract(ci_warm, ci_full)).max() <= 1e-6)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
