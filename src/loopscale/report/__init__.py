"""Reports of a sweep's analysis: report.md and a self-contained report.html (plots embedded) with φ and its
CI, rendered from ``analysis.sweep.SweepAnalysis`` (``loopscale.analysis`` computes, this package lays
out)."""

from loopscale.report.build import Report, render_report

__all__ = ["Report", "render_report"]
