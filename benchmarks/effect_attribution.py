"""Does the pairs' rule name only what its own intervals support, and name the right effect? (issues 43, 44)

Variant arms are built from the published base (``results/laptop-factorial``): every looped run of the base,
re-trained under another name, with a known effect added to the base run's own loss plus pair noise (iid sd
``--iid``, an (r, width) group sd ``--group``, both in nats):

- ``none``: no effect;
- ``offset``: a constant −0.06 nats on every looped model;
- ``delta phi ±0.15``, ``delta phi +0.30``: L̂(φ + Δφ) − L̂(φ) under the base's e-per-r fit at the run;
- ``every model``: +0.03 nats on every run, r = 1 included (the variant re-trains the r = 1 runs too);
- ``D multiplier 1.5``: L̂(1.5·D) − L̂(D) (a data multiplier: shrinks with D);
- ``N multiplier 1.5``: L̂(1.5·N_eff) − L̂(N_eff) (a parameter or compute multiplier: shrinks with N);
- ``width slope``: −0.06 nats − 0.14 per decade of width (hyperconnections' shape).

Each arm goes through ``pairs.effects.analyse_pairs`` exactly as ``loopscale compare`` runs it; the base arm
is the same in every arm, so its random-effects bootstrap is drawn once (seed 0, compare's default).
Printed per effect: the share of arms naming each model (± its Monte Carlo SE), wrong attribution (a term
named that the truth lacks; for a multiplier on the looped runs, a term other than the offset that stands for
it: over one design's range of D it is nearly a constant),
**disagreement** (a named term whose printed interval holds 0; the goal: none), how often the truth's shape
is named (a term of the chosen model, or a multiplier named beside a constant: ``also_consistent``), how
often a wrong term is named with the truth nowhere in the verdict, how often the verdict says
the effect is not one constant along width, and how often each shape of ``pairs.shapes`` describes the
pairs (lack of fit p ≥ 0.01).

    nice python benchmarks/effect_attribution.py --arms 40 --out results/law-check/effect-attribution.json

(``--effects`` runs some of them; ``--merge`` adds them to an existing ``--out``.)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import time
from pathlib import Path

import numpy as np

import loopscale.pairs.effects as effects_module
from loopscale.fit import load_table
from loopscale.fit.fitter import design_for
from loopscale.fit.law import log_prediction
from loopscale.fit.table import RunTable
from loopscale.io import atomic_write_json
from loopscale.pairs.effects import BaseLaw, analyse_pairs, with_base_fit
from loopscale.pairs.rule import TERMS, model_name

ROOT = Path(__file__).resolve().parents[1]
#: Each effect's shape as a verdict names it: a term of the rule, or a multiplier named beside a constant
TRUE_SHAPES = {
    "offset": "offset",
    "delta_phi": "delta_phi",
    "every": "every",
    "d_multiplier": "D multiplier",
    "n_multiplier": "N multiplier",
}
#: The rule's terms that stand for an effect outside them (not a wrong attribution)
STANDS_FOR = {"d_multiplier": {"offset"}, "n_multiplier": {"offset"}}
EFFECTS = {
    "none": {},
    "offset": {"offset": -0.06},
    "delta phi +0.15": {"delta_phi": 0.15},
    "delta phi -0.15": {"delta_phi": -0.15},
    "delta phi +0.30": {"delta_phi": 0.30},
    "every model": {"every": 0.03},
    "D multiplier 1.5": {"d_multiplier": 1.5},
    "N multiplier 1.5": {"n_multiplier": 1.5},
    "width slope": {"offset": -0.06, "width_slope": -0.14},
}


def variant_arm(base: RunTable, fit, effect: dict, iid: float, group: float, seed: int) -> RunTable:
    """The base's looped runs (and its r = 1 runs where the effect touches every model) under new names,
    with ``effect`` and pair noise added to the base run's own loss (nats)."""
    rng = np.random.default_rng(seed)
    runs = base if "every" in effect else base.subset(base.r > 1)
    keys = sorted({(int(r), float(w)) for r, w in zip(runs.r, runs.width)})
    shift = dict(zip(keys, rng.normal(0.0, group, len(keys))))
    loss = runs.loss + rng.normal(0.0, iid, len(runs))
    loss += np.array([shift[(int(r), float(w))] for r, w in zip(runs.r, runs.width)])
    loss += effect.get("every", 0.0) + effect.get("offset", 0.0) * (runs.r > 1)
    design = design_for(runs, False, fit.extension, fit.ext_ref)
    law = BaseLaw(fit.theta, fit.theta[None], design, design, fit.law_form)
    if "delta_phi" in effect:
        loss += law.phi_effect(fit.theta, effect["delta_phi"])[0]
    for key in ("d_multiplier", "n_multiplier"):
        if key in effect:
            loss += multiplied(fit, design, key, effect[key])
    if "width_slope" in effect:
        centred = np.log10(runs.width) - np.log10(runs.width[runs.r > 1]).mean()
        loss += effect["width_slope"] * centred * (runs.r > 1)
    return dataclasses.replace(runs, run=np.array([f"v-{r}" for r in runs.run]), loss=loss)


def multiplied(fit, design, key: str, m: float) -> np.ndarray:
    """L̂ at D → m·D (``key`` "d_multiplier") or N_eff → m·N_eff ("n_multiplier") minus L̂, per run (nats)."""
    more = (
        dataclasses.replace(design, log_tokens=design.log_tokens + np.log(m))
        if key == "d_multiplier"
        else dataclasses.replace(design, n_once=design.n_once * m, n_rec=design.n_rec * m)
    )
    predict = lambda d: np.exp(log_prediction(fit.theta[None], d))[0]  # noqa: E731
    return predict(more) - predict(design)


def binomial_se(count: int, arms: int) -> float:
    """Monte Carlo SE of a share ``count``/``arms``: √(p(1 − p)/arms) (0 for 0 or all: then 3/arms bounds
    the share at 95%)."""
    p = count / arms
    return math.sqrt(p * (1 - p) / arms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", type=int, default=10, help="arms per effect")
    parser.add_argument("--first-seed", type=int, default=0, help="arm seeds run from here (more arms)")
    parser.add_argument("--iid", type=float, default=0.015)
    parser.add_argument("--group", type=float, default=0.005)
    parser.add_argument("--resamples", type=int, default=200)
    parser.add_argument("--simulations", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--effects", nargs="*", choices=list(EFFECTS), help="only these (default: all)")
    parser.add_argument("--merge", action="store_true", help="add to the effects already in --out")
    args = parser.parse_args()
    base = load_table(ROOT / "results" / "laptop-factorial" / "results.csv")
    fit = with_base_fit(base, "e-per-r", 100, 0)
    draw = effects_module.random_effects_bootstrap
    bootstrap = functools.cache(lambda resamples: draw(fit, base, resamples=resamples, seed=0))
    effects_module.random_effects_bootstrap = lambda _fit, _table, resamples, seed: bootstrap(resamples)
    # published JSON holds no machine's path: the output's name only
    out: dict = {"settings": vars(args) | {"out": args.out and args.out.name, "merge": None}, "effects": {}}
    if args.merge and args.out and args.out.exists():
        out["effects"] = json.loads(args.out.read_text())["effects"]
    start = time.perf_counter()
    for label, effect in EFFECTS.items():
        if args.effects and label not in args.effects:
            continue
        chosen, wrong, wrong_alone, named, disagree, varies, shapes, beside = [], 0, 0, 0, 0, 0, {}, 0
        truth = {TRUE_SHAPES[k] for k in effect if k in TRUE_SHAPES}
        for seed in range(args.first_seed, args.first_seed + args.arms):
            variant = variant_arm(base, fit, effect, args.iid, args.group, seed)
            doc = analyse_pairs(
                base, variant, fit, base_resamples=args.resamples, simulations=args.simulations, seed=seed
            )
            chosen.append(doc.chosen)
            terms = doc.chosen_terms
            said = set(terms) | set(doc.also_consistent)  # what the verdict names, alone or beside
            allowed = set(effect).union(*(STANDS_FOR.get(k, set()) for k in effect))
            wrong += any(t not in allowed for t in terms)
            wrong_alone += any(t not in allowed for t in terms) and not truth & said
            named += bool(truth) and truth <= said
            beside += bool(doc.also_consistent)
            varies += bool(doc.trend and doc.trend.varies)
            for row in doc.shapes:
                shapes[row.shape] = shapes.get(row.shape, 0) + bool(row.consistent)
            model = doc.chosen_model
            disagree += any(model.ci[t][0] <= 0 <= model.ci[t][1] for t in terms)
        shares = {m: chosen.count(m) / len(chosen) for m in sorted(set(chosen))}
        right = chosen.count(model_name(tuple(effect))) if set(effect) <= set(TERMS) and effect else None
        out["effects"][label] = {"arms": args.arms, "chosen": shares,
                                 "named_right": None if right is None else right / args.arms,
                                 "named_right_se": None if right is None else binomial_se(right, args.arms),
                                 "wrong_attribution": wrong / args.arms,
                                 "wrong_attribution_se": binomial_se(wrong, args.arms),
                                 "wrong_and_truth_unnamed": wrong_alone / args.arms,
                                 "truth_named": named / args.arms if truth else None,
                                 "multiplier_beside": beside / args.arms,
                                 "disagreement": disagree / args.arms, "not_constant": varies / args.arms,
                                 "shape_allowed": {k: v / args.arms for k, v in shapes.items()}}  # fmt: skip
        print(
            f"{label:16s} chosen {shares}  named right {right}/{args.arms}  wrong attribution "
            f"{wrong}/{args.arms} (the truth not named beside "
            f"it {wrong_alone}/{args.arms})  truth named {named}/{args.arms}  a multiplier named beside "
            f"{beside}/{args.arms}  named with an interval "
            f"holding 0 {disagree}/{args.arms}  not one constant {varies}/{args.arms}  shapes allowed "
            f"{shapes}  ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
        if args.out:
            atomic_write_json(args.out, out)


if __name__ == "__main__":
    main()
