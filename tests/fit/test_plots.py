"""The protocol's figures: every one is written (PNG + SVG), no two tick labels overlap on any figure, the
data collapse compares the fitted φ with φ = 0 and φ = 1, iso-FLOP vertices are drawn only where the
curve brackets them, the bootstrap histogram is not stretched by a few outliers, the loop-tax figure has one
legend and no blank cell, budgets keep their significant digits and residuals are drawn against width per r.
Assertions are on the matplotlib objects (limits, legends, texts, offsets), never on pixels."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from loopscale.fit import load_table, run_protocol  # noqa: E402
from loopscale.fit.identification_results import ProfileResult  # noqa: E402
from loopscale.fit.labels import (  # noqa: E402
    count_label,
    flops_label,
    percent_text,  # noqa: E402
)
from loopscale.fit.law import law_loss  # noqa: E402
from loopscale.fit.protocol_results import BaselineValues  # noqa: E402
from loopscale.fit.template import load_template  # noqa: E402
from loopscale.present.plot_axes import log_locator, panel_grid  # noqa: E402
from loopscale.present.plots import FIGURES, _save, plot_protocol, protocol_figures  # noqa: E402

from .conftest import simulated_grid  # noqa: E402

CPU_RESULTS = Path(__file__).resolve().parents[2] / "results" / "cpu" / "results.csv"


def _profile(phi_hat: float, lo: float | None, hi: float | None) -> ProfileResult:
    """A profile-likelihood result of the protocol's contract (a parabola around φ̂)."""
    grid = np.linspace(-3, 3, 41)
    deviance = 30.0 * (grid - phi_hat) ** 2
    return ProfileResult(
        phi=tuple(grid.tolist()),
        objective=tuple((1e-4 + deviance * 1e-6).tolist()),
        deviance=tuple(deviance.tolist()),
        threshold=3.841,
        level=0.95,
        interval=(lo, hi),
        open=(lo is None, hi is None),
        phi_hat=phi_hat,
        rss_min=2e-4,
        n_runs=len(grid),
        disjoint=False,
        agrees_with_bootstrap=True,
        disagreement=None,
    )


def _protocol(rows, **kw):
    table = load_table(rows)
    return run_protocol(table, restarts=30, bootstrap=10, seed=0, **kw), table


@pytest.fixture(scope="module")
def paper_grid():
    """The paper's 116-run grid, losses from the published law + 0.01 nats of noise."""
    return _protocol(simulated_grid(noise=0.01, seed=3))


@pytest.fixture(scope="module")
def cpu_sweep():
    """The published 48-run cpu sweep: narrow N ranges and cells whose parabola is not bracketed."""
    template, _ = load_template(CPU_RESULTS.parent / "sweep.yaml")
    with CPU_RESULTS.open() as fh:
        return _protocol(list(csv.DictReader(fh)), flops_model=template)


def _shown_labels(axis):
    """The tick labels matplotlib draws on ``axis``: visible, non-empty, at a tick inside the view."""
    lo, hi = sorted(axis.get_view_interval())
    tol = 1e-9 * (hi - lo)
    out = []
    for locs, ticks in (
        (axis.get_majorticklocs(), axis.get_major_ticks),
        (axis.get_minorticklocs(), axis.get_minor_ticks),
    ):
        for loc, tick in zip(locs, ticks(len(locs))):
            if lo - tol <= loc <= hi + tol:
                out += [t for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text().strip()]
    return out


def _tick_labels(fig):
    """(text, window extent) of every tick label the drawn figure shows, on every axis of every panel."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [
        (label.get_text(), label.get_window_extent(renderer))
        for ax in fig.axes
        if ax.get_visible()
        for axis in (ax.xaxis, ax.yaxis)
        for label in _shown_labels(axis)
    ]


def _overlaps(a, b) -> bool:
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width > 0.5 and height > 0.5  # pixels


@pytest.mark.parametrize("case", ["paper_grid", "cpu_sweep"])
def test_no_two_tick_labels_overlap_on_any_figure(case, request):
    protocol, table = request.getfixturevalue(case)
    names = []
    for name, fig in protocol_figures(protocol, table):
        names.append(name)
        try:
            labels = _tick_labels(fig)
            assert labels, name
            clashes = [(a[0], b[0]) for a, b in itertools.combinations(labels, 2) if _overlaps(a[1], b[1])]
            assert not clashes, f"{case}/{name}: overlapping tick labels {clashes}"
            for ax in fig.axes:  # a log axis that shows labels shows at least two to read the scale by
                for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
                    shown = [t.get_text() for t in _shown_labels(axis)]
                    if ax.get_visible() and scale == "log" and shown:
                        assert len(shown) >= 2, f"{case}/{name}: {shown}"
        finally:
            plt.close(fig)
    # a φ that the point fit and bootstrap already call not identified gets no profile scan to plot
    assert names == [name for name in FIGURES if name != "phi_profile" or protocol.profile is not None]


def test_every_figure_is_written_as_png_and_svg(paper_grid, tmp_path):
    protocol, table = paper_grid
    paths = plot_protocol(protocol, table, tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"{n}.{ext}" for n in FIGURES for ext in ("png", "svg"))
    for name in FIGURES:
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in (tmp_path / f"{name}.svg").read_text()[:2000]
    assert not plt.get_fignums()  # every figure closed


def test_a_rebuilt_figure_is_byte_identical_and_figures_keep_distinct_svg_ids(paper_grid, tmp_path):
    protocol, table = paper_grid
    first, again = tmp_path / "a", tmp_path / "b"
    plot_protocol(protocol, table, first)
    plot_protocol(protocol, table, again)
    for name in FIGURES:
        for ext in ("png", "svg"):
            assert (first / f"{name}.{ext}").read_bytes() == (again / f"{name}.{ext}").read_bytes(), name
    # report.html inlines every SVG: the same drawing saved under two names must not share hashed ids
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [3, 1, 2], marker="o")
    _save(fig, tmp_path, "one")
    _save(fig, tmp_path, "two")
    plt.close(fig)
    hashed = [
        set(re.findall(r'id="([a-z]+[0-9a-f]{10})"', (tmp_path / f"{n}.svg").read_text()))
        for n in ("one", "two")
    ]
    assert hashed[0] and hashed[1] and not hashed[0] & hashed[1]


def test_collapse_compares_the_fitted_phi_with_phi_0_and_1(paper_grid):
    protocol, table = paper_grid
    fig = dict(protocol_figures(protocol, table))["collapse"]
    try:
        titles = [ax.get_title() for ax in fig.axes]
    finally:
        plt.close("all")
    assert len(titles) == 3
    assert titles[0].startswith(f"fitted φ = {protocol.fit.phi:.3f}")
    assert titles[1].startswith("φ = 0") and titles[2].startswith("φ = 1")
    rmse = [float(t.split("RMSE ")[1].split()[0]) for t in titles]
    assert rmse[0] < rmse[1] and rmse[0] < rmse[2]  # the collapse is tightest at the fitted φ


def test_vertices_are_drawn_only_where_the_curve_brackets_them(cpu_sweep):
    protocol, table = cpu_sweep
    minima = protocol.cell_minima
    bracketed = [m for m in minima if m.bracketed]
    assert 0 < len(bracketed) < len(minima)  # the cpu sweep has both kinds
    figs = dict(protocol_figures(protocol, table))
    try:
        for name in ("isoflop", "loop_tax"):
            stars = [
                c
                for ax in figs[name].axes
                for c in ax.collections
                if any(p.vertices.shape[0] == 11 for p in c.get_paths())  # the '*' marker path
            ]
            assert len(stars) == len(bracketed), name
        iso = figs["isoflop"].axes
        legend = [t.get_text() for ax in iso if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert sum("(not bracketed)" in t for t in legend) == len(minima) - len(bracketed)
        # the loop-tax panels name their unbracketed cells in the panel (its one legend is the figure's)
        notes = [t.get_text() for ax in figs["loop_tax"].axes for t in ax.texts]
        named = sum(n.removeprefix("not bracketed: ").count("r = ") for n in notes if "not bracketed" in n)
        assert named == len(minima) - len(bracketed)
    finally:
        plt.close("all")


@pytest.mark.parametrize("open_end", [False, True])
def test_profile_plot_marks_both_intervals(paper_grid, open_end):
    protocol, table = paper_grid
    assert protocol.profile is not None
    if open_end:  # an interval open above: drawn to the end of the grid and labelled open
        protocol = dataclasses.replace(
            protocol, profile=_profile(protocol.fit.phi, protocol.fit.phi - 0.2, None)
        )
    fig = dict(protocol_figures(protocol, table))["phi_profile"]
    try:
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    finally:
        plt.close("all")
    interval = next(t for t in legend if t.startswith("profile 95% interval ["))
    assert interval.endswith(", open]") == open_end
    assert any("bootstrap 95% CI [" in t for t in legend)
    assert any("threshold 3.84" in t for t in legend)
    assert any(t.startswith("φ̂ = ") for t in legend)


@pytest.mark.parametrize("lo", [3.0, 7.9e3, 1.0e5, 4.6e17])
@pytest.mark.parametrize("ratio", [1.02, 1.3, 3.0, 12.0, 150.0, 1e4, 1e9, 1e15])
def test_log_ticks_are_few_and_inside(lo, ratio):
    ticks = log_locator().tick_values(lo, lo * ratio)
    inside = [t for t in ticks if lo * (1 - 1e-9) <= t <= lo * ratio * (1 + 1e-9)]
    assert len(inside) <= 6
    if ratio >= 1.3:
        assert len(inside) >= 1
    assert np.all(np.diff(ticks) > 0)


def test_tick_label_units():
    assert [count_label(v) for v in (500, 8_000, 20_000, 1.5e6, 2e9)] == ["500", "8K", "20K", "1.5M", "2B"]
    assert [flops_label(v) for v in (2e11, 1e12, 6.3e11, 4.64e17)] == ["2e11", "1e12", "6.3e11", "4.64e17"]
    assert math.isclose(float(flops_label(3e5).replace("e", "E")), 3e5)


@pytest.mark.parametrize(
    "budget, text",
    [
        (1.25e13, "1.25e13"),
        (2.5e12, "2.5e12"),
        (1.25e13 * (1 + 1e-12), "1.25e13"),
        (2.154434690031884e19, "2.154e19"),
    ],
)
def test_budgets_keep_their_significant_digits(budget, text):
    assert flops_label(budget) == text
    assert float(text) == pytest.approx(budget, rel=5e-4)  # what is read back is the budget


def test_percentages_keep_their_significant_digit():
    shares = (0.005, 0.0004, 0.053, 0.72, 0.0)
    assert [percent_text(v) for v in shares] == ["0.5%", "0.04%", "5.3%", "72%", "0%"]


@pytest.mark.parametrize("n, shape", [(1, (1, 1)), (3, (1, 3)), (4, (2, 2)), (6, (2, 3)), (9, (3, 3))])
def test_panel_grids_leave_no_blank_cell_when_one_can_be_avoided(n, shape):
    assert panel_grid(n) == shape


def test_bootstrap_histogram_is_not_stretched_by_a_few_outliers(paper_grid):
    """Four resamples stuck at φ = −3 (the box edge) neither set the axis nor vanish unmentioned."""
    protocol, table = paper_grid
    rng = np.random.default_rng(0)
    phis = np.concatenate([rng.normal(protocol.fit.phi, 0.03, 196), [-3.0] * 4])
    boot = dataclasses.replace(protocol.bootstrap, samples={**protocol.bootstrap.samples, "phi": tuple(phis)})
    fig = dict(protocol_figures(dataclasses.replace(protocol, bootstrap=boot), table))["phi_bootstrap"]
    try:
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        texts = [t.get_text() for t in ax.texts]
        counted = sum(bar.get_height() for bar in ax.containers[0])  # the histogram's bars
    finally:
        plt.close("all")
    bulk = np.percentile(phis[:196], [0, 100])
    assert lo > -1 and lo < bulk[0] and hi > bulk[1]  # the bulk fills the axis, −3 is off it
    assert hi - lo < 0.5
    assert any(t == "4 resamples outside the axis: 4 below, 0 above" for t in texts), texts
    assert counted == 196  # every resample inside the axis is in a bin


def test_bootstrap_histogram_without_outliers_says_nothing_about_them(paper_grid):
    protocol, table = paper_grid
    fig = dict(protocol_figures(protocol, table))["phi_bootstrap"]
    try:
        texts = [t.get_text() for t in fig.axes[0].texts]
        lo, hi = fig.axes[0].get_xlim()
    finally:
        plt.close("all")
    samples = protocol.bootstrap.samples["phi"]
    assert not any("outside the axis" in t for t in texts)
    assert lo <= min(samples) and max(samples) <= hi


@pytest.mark.parametrize("case", ["paper_grid", "cpu_sweep"])
def test_loop_tax_has_one_legend_and_no_blank_cell(case, request):
    protocol, table = request.getfixturevalue(case)
    budgets = sorted(set(table.budget.tolist()))
    rs = sorted(set(table.r.tolist()))
    fig = dict(protocol_figures(protocol, table, BaselineValues(6.0, 4.0, 256, 1024, 64)))["loop_tax"]
    try:
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
        assert len(legends) == 1
        entries = [t.get_text() for t in legends[0].get_texts()]
        assert entries[: len(rs)] == [f"r = {r}" for r in rs]
        assert "bigram table 4.00 (unigram 6.00)" in entries and len(entries) == len(set(entries))
        panels = [ax for ax in fig.axes if ax.has_data()]
        titles = [ax.get_title() for ax in panels]
        assert titles == [f"C = {flops_label(c)} FLOPs" for c in budgets]
        blank = [ax for ax in fig.axes if not ax.has_data() and ax.get_legend() is None]
        assert not blank  # no invisible or empty cell: a spare cell, if any, holds the legend
    finally:
        plt.close("all")


def test_residuals_against_width_one_panel_per_r(paper_grid):
    protocol, table = paper_grid
    rs = sorted(set(table.r.tolist()))
    fig = dict(protocol_figures(protocol, table))["residuals_vs_width"]
    try:
        panels = [ax for ax in fig.axes if ax.has_data()]
        assert [ax.get_title() for ax in panels] == [f"r = {r}" for r in rs]
        coef = protocol.fit.coefficients
        for ax, r in zip(panels, rs):
            points = np.concatenate([c.get_offsets() for c in ax.collections])
            m = table.r == r
            expected = table.loss[m] - law_loss(coef, table.n_once[m], table.n_rec[m], r, table.tokens[m])
            assert sorted(map(tuple, np.round(points, 9))) == sorted(
                zip(np.round(table.width[m], 9), np.round(expected, 9))
            )
    finally:
        plt.close("all")


def test_residuals_against_width_needs_widths(paper_grid):
    protocol, table = paper_grid
    no_width = dataclasses.replace(table, width=np.full(len(table), np.nan))
    assert "residuals_vs_width" not in dict(protocol_figures(protocol, no_width))
    plt.close("all")


def test_the_overlap_check_sees_crowded_labels():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_xticks(range(40), [f"label {i}" for i in range(40)])
    try:
        labels = _tick_labels(fig)
    finally:
        plt.close("all")
    assert any(_overlaps(a[1], b[1]) for a, b in itertools.combinations(labels, 2))
