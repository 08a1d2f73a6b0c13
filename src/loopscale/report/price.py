"""``loopscale price``'s report: the verdict first, the "is it φ?" figure, every look, then the pairs'
analysis (renders ``price.json``'s document; recomputes nothing)."""

from __future__ import annotations

from pathlib import Path

from loopscale.io import atomic_write_text
from loopscale.pairs.results import PriceResult, TestTimeDepth
from loopscale.present.case_study_figures import EffectsDisplay, ExcessByWidthDisplay
from loopscale.present.price_text import price_verdict
from loopscale.present.test_time import TestTimeDisplay, depth_lines
from loopscale.report.compare import effect_blocks
from loopscale.report.document import Document, Image, Section, Table
from loopscale.report.figures import caption


def write_price_report(result: PriceResult, out: Path, depth: TestTimeDepth | None = None) -> Path:
    """report.md and report.html in ``out`` with the figures beside them → report.md's path. ``depth``: the
    arm's test-time loop counts (``loopscale eval-depth``), a section and a figure of their own."""
    effects = result.effects
    figures = [
        EffectsDisplay.from_result(effects, result.recipe).plot().save(out / "loss_change_by_r"),
        ExcessByWidthDisplay.from_result(effects, result.recipe).plot().save(out / "excess_by_width"),
    ]
    looks = Table(
        [
            "look",
            "pairs",
            "size",
            "alpha spent",
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
                f"{k.size:.4f}",
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
    report = Document(
        title=f"Price of {result.recipe} against {result.base}",
        lead=[f"**{price_verdict(result)}**"],
        key_figures=[Image(figure, caption(figure)) for figure in figures],
        sections=[
            Section(
                "Looks",
                [
                    "Each look analyses the pairs trained so far at its share of alpha (Lan–DeMets, Pocock "
                    "type), so looking after every batch does not inflate false attribution; a look names an "
                    "effect only where its interval at 1 − size excludes 0.",
                    looks,
                ],
            ),
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
