"""Do a base extension's runs lie on the published base's law? (issue 51: extension runs are held-out cells)

The law is fitted to the base alone (the paper's joint form, as ``price`` reads pairs through it); each
extension run's loss is then predicted at its own N_once, N_rec, r and D. Printed: every run's residual in
nats beside the base's own residual RMS, and Chow's predictive F of all of them
(``fit.lawcheck.predictive_f``: log-loss residuals, widened for extrapolation) with its p-value. A small p
says the extension cells leave the base law, and the pairs read at them through it are extrapolations that
do not hold; a large p from a handful of runs rules out only a large departure.

    python benchmarks/extension_check.py --extension results/laptop-factorial-ext
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.stats import f as f_dist

from loopscale.fit import load_table
from loopscale.fit.fitter import fit_law
from loopscale.fit.lawcheck import predictive_f

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, default=ROOT / "results" / "laptop-factorial")
    parser.add_argument("--extension", type=Path, default=ROOT / "results" / "laptop-factorial-ext")
    parser.add_argument("--restarts", type=int, default=500)
    args = parser.parse_args()
    base = load_table(args.base / "results.csv")
    ext = load_table(args.extension / "results.csv")
    fit = fit_law(base, restarts=args.restarts)
    rms = float(np.sqrt(np.mean((base.loss - fit.predict_table(base)) ** 2)))
    pred = fit.predict_table(ext)
    phi = fit.coefficients["phi"]
    print(f"base law on {len(base)} runs (phi {phi:.3f}); its residual RMS {rms:.4f} nats")
    print(f"{'run':44s} {'loss':>7s} {'law':>7s} {'resid':>8s} {'/rms':>6s}")
    for name, loss, hat in zip(ext.run, ext.loss, pred):
        print(f"{name:44s} {loss:7.4f} {hat:7.4f} {loss - hat:+8.4f} {(loss - hat) / rms:+6.1f}")
    stat, df = predictive_f(fit, base, ext)
    if stat is None:
        print("no predictive F: the base fit leaves no residual degrees of freedom")
        return
    p = float(f_dist.sf(stat, len(ext), df))
    m = len(ext)
    print(f"Chow's predictive F of the {m} extension runs: {stat:.2f} on ({m}, {df}) df, p = {p:.2g}")


if __name__ == "__main__":
    main()
