"""Is ``loopscale price``'s stopping rule honest under optional stopping? (issue 41)

The plan is ``price``'s for a 1-hour cap against ``results/laptop-factorial`` (the base's looped cells in
greedy order, 21 pairs, looks after 4, 6, …, 21 pairs). Sequences of pairs are simulated on it with a known
truth (pair errors: the base's seed noise and the base law's (r, width) misfit, as ``price`` starts from),
and the rule runs after every look exactly as ``price`` does, stopping at the first look that names an
effect. Printed per truth, for α spent over the looks (``pairs.sequential``) and, for contrast, for the
full α at every look: wrong attribution (a term named that the truth lacks), named-with-an-interval-holding-0,
coverage of the true model's interval at the stop, and where the sequences stopped.
Goal: wrong attribution ≤ 5% and coverage ≥ 0.95 with looks after every batch.

    python benchmarks/price_calibration.py --sequences 400 --out results/law-check/price-calibration.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from loopscale.analysis.price import PriceSettings, plan_price
from loopscale.io import atomic_write_json
from loopscale.pairs.effects import Pairs, base_law
from loopscale.pairs.rule import Simulator, known_covariance
from loopscale.pairs.sequential import sequential_calibration

ROOT = Path(__file__).resolve().parents[1]
TRUTHS = {
    "no effect": {},
    "offset -0.06": {"offset": -0.06},
    "delta phi +0.15": {"delta_phi": 0.15},
    "delta phi -0.08": {"delta_phi": -0.08},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=400)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--resamples", type=int, default=200, help="base-law bootstrap draws")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    settings = PriceSettings(recipe="parcae", base=ROOT / "results" / "laptop-factorial", out=Path("unused"),
                             max_hours=args.hours)  # fmt: skip
    schedule = plan_price(settings)
    plan = schedule.pairs
    order = np.array(schedule.order)
    runs = plan.table.subset(order)
    keys = sorted({(int(r), float(w)) for r, w in zip(runs.r, runs.width)})
    cluster = np.array([keys.index((int(r), float(w))) for r, w in zip(runs.r, runs.width)])
    law = base_law(plan.fit, plan.table, Pairs(runs, runs, cluster, keys), args.resamples, 0)
    sd, cluster_sd = plan.sigma_pair, plan.cluster_sd
    sim = Simulator(
        np.zeros(len(runs)), law.phi_slope(law.theta)[0], law.token_part(law.draws), law.phi_slope(law.draws),
        runs.r > 1, cluster, {"iid": sd**2, "cluster": cluster_sd**2}, plan.noise.df,
        known_covariance(cluster, sd, cluster_sd),
    )  # fmt: skip
    counts, spent_sizes = list(schedule.looks.counts), list(schedule.looks.sizes)
    available = ("offset", "delta_phi")
    out: dict = {"counts": counts, "sizes": spent_sizes, "pair_sd": sd, "cluster_sd": cluster_sd,
                 "truths": {}}  # fmt: skip
    print(f"{len(runs)} pairs, looks after {counts}; pair sd {sd:.4f}, (r, width) sd {cluster_sd:.4f} nats")
    start = time.perf_counter()
    for label, truth in TRUTHS.items():
        fitted = {m: {t: truth.get(t, 0.0) for t in m} for m in (("offset",), ("delta_phi",), available)}
        out["truths"][label] = {}
        for plan_name, sizes in (
            ("spent", spent_sizes),
            ("full alpha each look", [0.04] * len(counts)),
        ):
            result = sequential_calibration(sim, counts, sizes, available, fitted, truth, args.sequences,
                                            np.random.default_rng(7))  # fmt: skip
            out["truths"][label][plan_name] = result.to_dict()
            cover = "–" if result.coverage is None else f"{result.coverage:.3f}"
            print(
                f"{label:16s} {plan_name:21s} wrong {result.wrong:.3f}  interval holds 0 "
                f"{result.disagreement:.3f}  coverage {cover}  chosen {result.chosen}  "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
            if args.out:
                atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
