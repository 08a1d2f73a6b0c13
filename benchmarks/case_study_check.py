"""Check a published case-study arm against its goals, refitting Δφ without loopscale's fitter.

    .venv/bin/python benchmarks/case_study_check.py results/laptop-truncated-bptt   # --base: the base arm

Reads only the two ``results.csv`` tables, the arm's ``compare.json`` and its ``fit.json`` baselines (plain
``csv``/``json``; no ``loopscale.fit`` import), then checks:

1. ``compare.json`` holds ``delta_phi`` {estimate, ci, p, method}, ``delta_phi_separate``, ``per_budget`` (a
   list of {budget, delta_phi, ci}) and ``law_check`` per arm;
2. at least 6 of the arm's looped runs are replicate seeds (seed ≠ 0);
3. every variant run is below the bigram table (nats);
4. an independent shared-nuisance refit agrees with ``delta_phi.estimate`` within 0.03: the base arm's runs
   (all of ``--base``) and the variant's looped runs, one law with E, A, α, B, β (and κ of E·r^κ when
   compare.json's form is ``e-per-r``) shared and φ + Δφ on the variant's looped runs, fitted by SciPy
   L-BFGS-B with finite differences on the summed Huber loss (δ = 1e-3) of log-loss residuals (method §8.3)
   from ``--starts`` uniform random starts in the method's box.

Prints each check and exits 1 when one fails.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

HUBER_DELTA = 1e-3
AGREE = 0.03  # |independent − published| Δφ allowed
MIN_REPLICATES = 6
# (log A, log B, log E, α, β, φ, [κ], Δφ): method §8.3's box, κ and Δφ within the extension's range
BOX = [(0, 30), (0, 30), (-1, 2), (0, 1), (0, 1), (-3, 3)]
KAPPA_BOX, DELTA_BOX = (-1, 1), (-3, 3)


def read_runs(path: Path) -> list[dict]:
    with path.open() as fh:
        return [row for row in csv.DictReader(fh) if row["status"] == "ok"]


def design(base: list[dict], variant: list[dict]) -> dict[str, np.ndarray]:
    """Columns of the joint table: base runs, then the variant's looped runs (its r = 1 rows are the
    base's anchors, already in the base table)."""
    looped = [row for row in variant if int(row["r"]) > 1]
    rows = base + looped
    col = {k: np.array([float(row[k]) for row in rows]) for k in ("n_once", "n_rec", "r", "tokens", "loss")}
    col["is_variant"] = np.array([0.0] * len(base) + [1.0] * len(looped))
    return col


def huber(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    return np.where(a <= HUBER_DELTA, 0.5 * x * x, HUBER_DELTA * (a - 0.5 * HUBER_DELTA))


def objective(theta: np.ndarray, col: dict[str, np.ndarray], kappa: bool) -> float:
    a, b, e, alpha, beta, phi = theta[:6]
    k = theta[6] if kappa else 0.0
    dphi = theta[-1]
    phi_i = phi + dphi * col["is_variant"]
    n_eff = col["n_once"] + col["r"] ** phi_i * col["n_rec"]
    pred = np.exp(e) * col["r"] ** k + np.exp(a) * n_eff**-alpha + np.exp(b) * col["tokens"] ** -beta
    return float(huber(np.log(pred) - np.log(col["loss"])).sum())


def refit(col: dict[str, np.ndarray], kappa: bool, starts: int, seed: int) -> np.ndarray:
    box = BOX + ([KAPPA_BOX] if kappa else []) + [DELTA_BOX]
    lo, hi = np.array(box, float).T
    rng = np.random.default_rng(seed)
    best, best_f = None, np.inf
    for _ in range(starts):
        x0 = rng.uniform(lo, hi)
        x0[-1] = rng.uniform(-0.3, 0.3)  # Δφ starts near 0: the arms are one recipe change apart
        res = minimize(objective, x0, args=(col, kappa), method="L-BFGS-B", bounds=box,
                       options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000})  # fmt: skip
        if res.fun < best_f:
            best, best_f = res.x, res.fun
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arm", type=Path)
    ap.add_argument("--base", type=Path, default=Path("results/laptop-factorial"))
    ap.add_argument("--starts", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    compare = json.loads((args.arm / "compare.json").read_text())
    bigram = json.loads((args.arm / "fit.json").read_text())["baselines"]["values"]["bigram"]
    base, variant = read_runs(args.base / "results.csv"), read_runs(args.arm / "results.csv")
    failures = []

    def check(ok: bool, text: str) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {text}")
        if not ok:
            failures.append(text)

    dphi = compare.get("delta_phi") or {}
    per_budget = compare.get("per_budget") or []
    keys_ok = (
        {"estimate", "ci", "p", "method"} <= set(dphi)
        and "delta_phi_separate" in compare
        and bool(per_budget)
        and all({"budget", "delta_phi", "ci"} <= set(row) for row in per_budget)
        and {"base", "variant"} <= set(compare.get("law_check") or {})
    )
    check(keys_ok, "compare.json: delta_phi {estimate, ci, p, method}, delta_phi_separate, per_budget, "
          "law_check per arm")  # fmt: skip
    looped = [row for row in variant if int(row["r"]) > 1]
    replicates = sum(int(row["seed"]) != 0 for row in looped)
    check(replicates >= MIN_REPLICATES, f"{replicates} replicate-seed variant runs (≥ {MIN_REPLICATES})")
    worst = max(float(row["loss"]) for row in looped)
    above = sum(float(row["loss"]) >= bigram for row in looped)
    check(above == 0, f"{len(looped) - above} of {len(looped)} variant runs below the bigram table "
          f"({bigram:.3f} nats; highest {worst:.3f})")  # fmt: skip
    kappa = dphi.get("form") == "e-per-r"
    col = design(base, variant)
    theta = refit(col, kappa, args.starts, args.seed)
    diff = abs(theta[-1] - dphi["estimate"])
    what = f"{dphi.get('form')} form, {len(col['loss'])} runs, {args.starts} SciPy starts"
    check(diff <= AGREE, f"independent shared-nuisance refit ({what}): delta phi {theta[-1]:+.4f} vs "
          f"compare.json {dphi['estimate']:+.4f}, |diff| {diff:.4f} (≤ {AGREE})")  # fmt: skip
    print("OK" if not failures else f"FAILED: {len(failures)} check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
