"""Pilot analysis of issue 19 part 4: which change removes the r × width structure of the laptop residuals.

Run from the repository root: ``python results/laptop-pilots/analyse.py`` (writes analysis.json beside
this file; a few minutes of CPU for the fits; analysis.md is the written analysis of its figures).

Baseline: results/laptop (72 runs). The pilot grid of the issue is 2 budgets × widths {16, 32, 64} ×
r {1, 2, 8} = 18 cells per variant. What this script measures:

1. On the baseline's 18 pilot cells: the joint law (loopscale.fit.fit_law, 500 starts, no bootstrap), φ, RMSE,
   R², and the share of the residual sum of squares explained by group means (r × width, r, width, budget;
   with one run per cell a pure-noise table gives roughly groups/runs).
2. For each variant, on the cells it finished: the loss change against the baseline run of the same cell
   (same seed, data order, budget and steps), the gap to r = 1 at equal (budget, width), and the r × width
   interaction contrast (gap at d = 64 minus gap at d = 16) against the one the 72-run joint law predicts.
   A variant that removes the interaction moves the observed contrast towards the law's.
3. Runs a variant did not finish: the paired difference of the training loss against the baseline run at the
   same steps (mean over the last 200 logged steps), from metrics.jsonl.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from loopscale.fit import fit_law
from loopscale.fit.table import load_table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BASELINE = ROOT / "results" / "laptop"
KEY = ["budget", "width", "r"]
PILOT_CELLS = {"budget": [2.5e12, 4.3e12], "width": [16, 32, 64], "r": [1, 2, 8]}
# variant → (what changed, r whose runs are configured exactly as the baseline's and are taken from it)
VARIANTS = {
    "lr-shared": ("optim.d_ref = 2,775,840 tokens (r = 1's D_ref): every r gets r = 1's matrix LR", [1]),
    "hd8": ("model.head_dim = 8 (d = 16 → 2 heads, 32 → 4, 64 → 8)", []),
}
# the pilot sweep folders (outside the repository: checkpoints) whose unfinished runs are read
PILOTS = Path(sys.argv[1] if len(sys.argv) > 1 else "pilots")  # the pilot sweeps' folder (argument 1)
PILOT_FOLDERS = {"lr-shared": ["lr-r2", "lr-r8"], "hd8": ["hd8-r1", "hd8-d64"]}
COLUMNS = ["run", "budget", "width", "r", "n_once", "n_rec", "tokens", "loss"]


def rss_shares(frame: pd.DataFrame, resid: np.ndarray) -> dict[str, float]:
    """Share of Σ residual² that the residuals' group means explain, per grouping (and the group counts)."""
    total = float(np.sum(resid**2))
    out: dict[str, float] = {}
    groupings = {"r_x_width": ["r", "width"], "r": ["r"], "width": ["width"], "budget": ["budget"]}
    for name, cols in groupings.items():
        keys = [frame[c].to_numpy() for c in cols]
        means = pd.Series(resid).groupby(keys).transform("mean").to_numpy()
        out[name] = 1.0 - float(np.sum((resid - means) ** 2)) / total
        out[f"{name}_groups"] = int(frame.groupby(cols).ngroups)
    return out


def joint_fit(frame: pd.DataFrame):
    """(fit, residuals in nats) of the joint law on ``frame``."""
    table = load_table(frame[COLUMNS].to_dict("records"))
    fit = fit_law(table, restarts=500, seed=0)
    return fit, table.loss - fit.predict_table(table)


def fit_summary(frame: pd.DataFrame) -> dict:
    fit, resid = joint_fit(frame)
    means = pd.Series(resid).groupby([frame.r.to_numpy(), frame.width.to_numpy()]).mean()
    return {
        "runs": len(frame),
        "phi": fit.phi,
        "at_bound": fit.at_bound,
        "rmse": float(np.sqrt(np.mean(resid**2))),
        "r2": fit.r2,
        "rss_share": rss_shares(frame, resid),
        "mean_residual": {f"r{r}_d{w}": float(v) for (r, w), v in means.items()},
    }


def paired_train_loss(base_metrics: Path, pilot_metrics: Path, window: int = 200) -> dict:
    """Mean training-loss difference pilot − baseline over the pilot's last ``window`` logged steps."""
    def load(path: Path) -> dict[int, float]:
        return {j["step"]: j["loss"] for j in map(json.loads, path.read_text().splitlines())}

    base, pilot = load(base_metrics), load(pilot_metrics)
    steps = sorted(set(base) & set(pilot))[-window:]
    return {
        "steps": [steps[0], steps[-1]],
        "of": max(base),
        "diff": float(np.mean([pilot[k] - base[k] for k in steps])),
    }


def main() -> int:
    base = pd.read_csv(BASELINE / "results.csv")
    base = base[base.status == "ok"]
    cells = base[np.logical_and.reduce([base[c].isin(v) for c, v in PILOT_CELLS.items()])]
    full_fit, full_resid = joint_fit(base)
    law = dict(zip(base.run, base.loss - full_resid))  # the 72-run law's prediction per baseline run
    out: dict = {"baseline_18_cells": fit_summary(cells), "baseline_72": fit_summary(base)}
    for name, (change, shared_rs) in VARIANTS.items():
        path = HERE / name / "results.csv"
        doc: dict = {"change": change, "cells": [], "contrasts": [], "unfinished": []}
        pilot = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=KEY + ["loss", "status", "run"])
        pilot = pilot[pilot.status == "ok"]
        merged = pilot.merge(base, on=KEY, suffixes=("", "_base"))
        for row in merged.itertuples():
            doc["cells"].append({"budget": row.budget, "width": row.width, "r": row.r, "loss": row.loss,
                                 "baseline": row.loss_base, "change": row.loss - row.loss_base})
        variant = pd.concat([pilot, base[base.r.isin(shared_rs)]], ignore_index=True)
        for (budget, r), _ in pilot.groupby(["budget", "r"]):
            def gap(frame, width, budget=budget, r=r):
                row = frame[(frame.budget == budget) & (frame.width == width)]
                have = row[row.r == r].loss, row[row.r == 1].loss
                return float(have[0].iloc[0] - have[1].iloc[0]) if all(len(h) for h in have) else None

            ends = [(w, gap(variant, w), gap(base, w)) for w in (16, 64)]
            if all(v is not None for _, v, _ in ends):
                def run(width, k, budget=budget):
                    return base[(base.budget == budget) & (base.width == width) & (base.r == k)].run.iloc[0]

                law_gap = {w: law[run(w, r)] - law[run(w, 1)] for w in (16, 64)}
                doc["contrasts"].append({
                    "budget": budget, "r": int(r),
                    "baseline": ends[1][2] - ends[0][2], "variant": ends[1][1] - ends[0][1],
                    "law_72": law_gap[64] - law_gap[16],
                })
        for folder in sorted(f for sub in PILOT_FOLDERS[name] for f in (PILOTS / sub / "runs").glob("*")):
            if (folder / "result.json").exists() or not (folder / "metrics.jsonl").exists():
                continue
            base_run = BASELINE / "runs" / folder.name / "metrics.jsonl"
            if base_run.exists():
                paired = paired_train_loss(base_run, folder / "metrics.jsonl")
                doc["unfinished"].append({"run": folder.name, **paired})
        out[name] = doc
    (HERE / "analysis.json").write_text(json.dumps(out, indent=1, default=float) + "\n")
    print(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
