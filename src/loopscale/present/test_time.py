"""Loops at test time (``pairs.test_time.TestTimeDepth``): the sentence per relation and the figure of the
validation loss against test-time loop count, both arms."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loopscale.pairs.results import TestTimeDepth, TestTimeGain
from loopscale.present.figures import save_figure
from loopscale.present.numbers import interval, p_value

RELATION_WORDS = {"1": "one loop", "r/2": "half the trained loops", "2r": "twice the trained loops"}


def gain_sentence(gain: TestTimeGain, recipe: str) -> str:
    """What the pairs say at one relation: the difference named only where its interval excludes 0."""
    named = gain.ci.low is not None and gain.ci.high is not None and (gain.ci.low > 0 or gain.ci.high < 0)
    change = (
        f"the base's models change by {gain.base_change:+.4f} nats and {recipe}'s by "
        f"{gain.variant_change:+.4f} ({gain.pairs} pairs)"
    )
    difference = f"{gain.difference:+.4f} nats {interval(gain.ci, signed=True, digits=4)}, {p_value(gain.p)}"
    if not named:
        return f"At {RELATION_WORDS[gain.relation]}, {change}: no difference named ({difference})."
    side = "below" if gain.difference < 0 else "above"
    return (
        f"At {RELATION_WORDS[gain.relation]}, {change}: {recipe}'s change lies {abs(gain.difference):.4f} "
        f"nats {side} its base pairs', {difference}."
    )


def depth_lines(depth: TestTimeDepth) -> list[str]:
    """The sentences of the report's test-time section, one per relation, then how the numbers were got."""
    retrained = sum(run.weights == "retrained" for p in depth.pairs for run in (p.base, p.variant))
    how = (
        f"Each run is evaluated on its own {depth.pairs[0].base.val_tokens:,} validation tokens; a change is "
        "L(test-time loops) − L(trained r), and the recipe's effect is the mean over pairs of its change "
        f"minus its base pair's, with a t interval at {100 * depth.level:.1f}% (95% over the "
        f"{len(depth.gains)} relations, Bonferroni). The evaluation at the trained r reproduces each"
        f" published val loss to {depth.largest_reproduction_gap:.1e} nats"
    )
    if retrained:
        how += (
            f" ({retrained} base run(s) evaluated from a retraining of their config.yaml, since published "
            "weights are not kept: that gap is the retraining's)"
        )
    return [gain_sentence(g, depth.recipe) for g in depth.gains] + [how + "."]


@dataclass
class TestTimeDisplay:
    """Val loss against test-time loop count: one panel per trained r, the mean change from the trained r
    over the pairs (base grey, recipe coloured), 95% t error bars, y linear within ±0.01 nats and
    logarithmic beyond. Display style: ``from_result(depth)``,
    ``plot()``, ``save(stem)``."""

    __test__ = False

    depth: TestTimeDepth
    figure_: object = None

    @classmethod
    def from_result(cls, depth: TestTimeDepth) -> TestTimeDisplay:
        return cls(depth)

    def plot(self) -> TestTimeDisplay:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        curves = self.depth.curves
        fig, axes = plt.subplots(1, len(curves), figsize=(3.2 * len(curves) + 0.6, 3.6), squeeze=False)
        for ax, curve in zip(axes[0], curves):
            x = np.array(curve.test_r, dtype=float)
            for values, half, label, style in (
                (curve.base_change, curve.base_half_width, "base", dict(color="0.45", marker="s")),
                (
                    curve.variant_change,
                    curve.variant_half_width,
                    self.depth.recipe,
                    dict(color="C3", marker="o"),
                ),
            ):
                ax.errorbar(x, values, yerr=half, capsize=3, lw=1.3, ms=5, label=label, **style)
            ax.axvline(curve.train_r, color="black", lw=0.6, ls=":")
            ax.axhline(0.0, color="black", lw=0.6)
            ax.set_xscale("log", base=2)
            # one loop costs tenths of a nat, more loops thousandths: a linear scale near 0 shows both
            ax.set_yscale("symlog", linthresh=0.01, linscale=1.5)
            ax.minorticks_off()
            ax.set_xticks(x, [str(t) for t in curve.test_r])
            ax.set_xlabel("test-time loops")
            ax.set_title(f"trained at r = {curve.train_r} ({curve.pairs} pairs)", fontsize=9)
        axes[0][0].set_ylabel("val loss − val loss at trained r (nats)")
        axes[0][-1].legend(fontsize=8, frameon=False)
        fig.suptitle(f"{self.depth.recipe} and its base pairs at test-time loop counts", fontsize=10)
        self.figure_ = fig
        return self

    def save(self, stem: Path) -> Path:
        self.figure_.tight_layout()
        return save_figure(self.figure_, stem)
