"""Reports of a sweep: report.md and a self-contained report.html (plots embedded) with φ and its CI."""

from loopscale.report.build import Report, build_report

__all__ = ["Report", "build_report"]
