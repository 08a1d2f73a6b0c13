"""``loopscale price``'s report: the verdict first, the "is it φ?" figure, every look, then the pairs'
analysis (renders ``price.json``'s document; recomputes nothing)."""

from __future__ import annotations

from pathlib import Path

from loopscale.io import atomic_write_text
from loopscale.pairs.results import PriceResult, TestTimeDepth
from loopscale.present.case_study_figures import EffectsDisplay, ExcessByWidthDisplay
from loopscale.present.price_text import (
    arm_label,
    looks_intro,
    paired_with,
    power_intro,
    power_table,
    price_verdict,
)
from loopscale.present.test_time import TestTimeDisplay, depth_lines
from loopscale.report.compare import effect_blocks
from loopscale.report.document import Document, Image, Section, Table
from loopscale.report.figures import caption


def write_price_report(result: PriceResult, out: Path, depth: TestTimeDepth | None = None) -> Path:
    """report.md and report.html in ``out`` with the figures beside them → report.md's path. ``depth``: the
    arm's test-time loop counts (``loopscale eval-depth``), a section and a figure of their own."""
    effects = result.effects
    by_r = EffectsDisplay.from_result(effects, arm_label(result), paired_with(result))
    figures = [
        by_r.plot().save(out / "loss_change_by_r"),
        ExcessByWidthDisplay.from_result(effects, arm_label(result)).plot().save(out / "excess_by_width"),
    ]
    bounded = result.plan.boundary is not None  # a plan from before issue 49 keeps its columns
    spent_heads = ("size", "alpha spent")
    looks = Table(
        [
            "look",
            "pairs",
            *(("critical value", "interval level", "wrong name by this look") if bounded else spent_heads),
            "planned hours",
            "chosen",
            "delta phi half-width",
            "(r, width) sd: pooled / from pairs (df)",
            "stop",
        ],
        [
            [
                str(k.look),
                str(k.pairs),
                *((f"{k.critical:.3f}", f"{100 * (1 - k.size):.2f}%") if bounded else (f"{k.size:.4f}",)),
                f"{k.spent:.4f}",
                f"{k.hours_planned:.2f}",
                k.chosen,
                "–" if k.delta_phi_half_width is None else f"{k.delta_phi_half_width:.3f}",
                f"{k.cluster_sd.cluster_sd:.4f} / "
                + ("–" if k.cluster_sd.estimate is None else f"{k.cluster_sd.estimate:.4f}")
                + f" ({k.cluster_sd.df})",
                k.stop or "",
            ]
            for k in result.looks
        ],
    )
    power = result.power  # what the plan could decide, before it spent (plans since issue 49)
    power_section = []
    if power is not None:
        table = Table(*power_table(power))
        power_section = [Section("What the plan could decide", [power_intro(power), table])]
    report = Document(
        title=f"Price of {result.recipe} against {result.base}" if result.against is None
        else f"Price of {result.recipe} against {result.against} (the law: {result.base})",
        lead=[f"**{price_verdict(result)}**"],
        key_figures=[Image(figure, caption(figure)) for figure in figures],
        sections=[
            Section(
                "Looks",
                [looks_intro(result.plan, effects.inverted), looks],
            ),
            *power_section,
            Section("Is it φ? The pairs at the last look", effect_blocks(effects)),
            *([] if depth is None else [_test_time_section(depth, out)]),
        ],
    )
    atomic_write_text(out / "report.md", report.markdown(out))
    atomic_write_text(out / "report.html", report.html())
    return out / "report.md"


def _test_time_section(depth: TestTimeDepth, out: Path) -> Section:
    figure = TestTimeDisplay.from_result(depth).plot().save(out / "loss_by_test_time_r")
    return Section("Loops at test time", [*depth_lines(depth), Image(figure, caption(figure))])
