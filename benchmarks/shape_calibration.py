"""Is the shape table's lack-of-fit test calibrated? (issue 49, item 5)

Arms built from the published base with known effects exactly as ``benchmarks/effect_attribution.py`` builds
them (``variant_arm``: pair noise iid sd ``--iid`` and (r, width) group sd ``--group``, nats), each read
through ``pairs.shapes.shape_table`` at the base law's fit, with ``--resamples`` random-effects bootstrap
draws of the base law (one set for every arm: the arms share the base; 0: the fit alone, so the test's
base-law term is 0 and its size is read bare). Printed per truth and per shape: the share of arms on which
the shape "describes the pairs" (lack of fit p ≥ 0.01) under the test of issue 49 (the shape against the
span of every shape, on the cluster means, beyond the (r, width) heterogeneity) and under the test before
it (the shape's between-cluster mean square against the within-cluster one, an F on (G − k, n − G) df).
Under ``none`` every shape is the truth (at 0), so 1 − that share is each test's size, 1% when calibrated.

    python benchmarks/shape_calibration.py --group 0.015 --out results/law-check/shapes-group-0.015.json
    python benchmarks/shape_calibration.py --group 0.005 --out results/law-check/shapes-group-0.005.json
    python benchmarks/shape_calibration.py --arms 300 --resamples 100 --effects none "D multiplier 1.5" \
        "N multiplier 1.5" --out results/law-check/shapes-group-0.015-draws.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import f as f_dist

from loopscale.fit import load_table
from loopscale.io import atomic_write_json
from loopscale.pairs.effects import base_law, match_pairs, with_base_fit
from loopscale.pairs.rule import least_squares
from loopscale.pairs.shapes import SHAPE_LEVEL, shape_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from effect_attribution import EFFECTS, variant_arm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def within_cluster_f(excess: np.ndarray, x: np.ndarray, cluster: np.ndarray) -> float | None:
    """The lack-of-fit p before issue 49: the shape's residual cluster means' mean square (G − k df) against
    the within-cluster mean square (n − G df): the (r, width) heterogeneity read as lack of fit."""
    resid = least_squares(excess, x)[1]
    groups = int(cluster.max()) + 1
    counts = np.bincount(cluster, minlength=groups)
    means = np.bincount(cluster, weights=resid, minlength=groups) / np.maximum(counts, 1)
    within = float(np.sum((resid - means[cluster]) ** 2))
    df_b, df_w = groups - x.shape[1], len(excess) - groups
    if df_b <= 0 or df_w <= 0 or within <= 0:
        return None
    return float(f_dist.sf(float(np.sum(counts * means**2)) / df_b / (within / df_w), df_b, df_w))


def shape_columns(law, looped: np.ndarray, thetas: np.ndarray) -> dict[str, np.ndarray]:
    """The table's one-parameter columns [K, n] under base-law ``thetas`` [K, P] (as
    ``pairs.effects.analyse_pairs`` builds them)."""
    return {
        "offset": np.broadcast_to(looped.astype(float), (len(thetas), len(looped))),
        "delta phi": law.phi_slope(thetas),
        "N multiplier": law.log_slope(thetas, "n"),
        "D multiplier": law.log_slope(thetas, "d"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", type=int, default=1000, help="arms per effect")
    parser.add_argument("--iid", type=float, default=0.015)
    parser.add_argument("--group", type=float, default=0.015)
    parser.add_argument("--resamples", type=int, default=0, help="base-law bootstrap draws (0: the fit only)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--effects", nargs="*", choices=list(EFFECTS), help="only these (default: all)")
    args = parser.parse_args()
    base = load_table(ROOT / "results" / "laptop-factorial" / "results.csv")
    fit = with_base_fit(base, "e-per-r", 100, 0)
    none = match_pairs(base, variant_arm(base, fit, {}, args.iid, args.group, 0))
    thetas = base_law(fit, base, none, args.resamples, 0).draws
    out: dict = {"settings": vars(args) | {"out": str(args.out)}, "effects": {}}
    start = time.perf_counter()
    for label, effect in EFFECTS.items():
        if args.effects and label not in args.effects:
            continue
        new: dict[str, int] = {}
        old: dict[str, int] = {}
        for seed in range(args.arms):
            pairs = match_pairs(base, variant_arm(base, fit, effect, args.iid, args.group, seed))
            law = dataclasses.replace(base_law(fit, base, pairs, 0, seed), draws=thetas)
            excess = pairs.change - law.token_part(law.theta)[0]
            columns = {k: v[0] for k, v in shape_columns(law, pairs.looped, law.theta[None]).items()}
            draws = shape_columns(law, pairs.looped, thetas)
            for row in shape_table(pairs, excess, pairs.change - law.token_part(thetas), draws, columns):
                new[row.shape] = new.get(row.shape, 0) + bool(row.consistent)
                x = (
                    columns[row.shape][:, None]
                    if row.shape in columns
                    else np.column_stack([pairs.looped, pairs.looped * np.log10(pairs.base.width)])
                )
                p = within_cluster_f(excess, x, pairs.cluster)
                old[row.shape] = old.get(row.shape, 0) + bool(p is not None and p >= SHAPE_LEVEL)
        share = lambda counts: {k: v / args.arms for k, v in counts.items()}  # noqa: E731
        out["effects"][label] = {"describes_new": share(new), "describes_old": share(old)}
        print(
            f"{label:16s} describes the pairs (p >= {SHAPE_LEVEL}), new test: "
            + ", ".join(f"{k} {v / args.arms:.3f}" for k, v in new.items())
            + "  |  old test: "
            + ", ".join(f"{k} {v / args.arms:.3f}" for k, v in old.items())
            + f"  ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
        if args.out:
            atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
