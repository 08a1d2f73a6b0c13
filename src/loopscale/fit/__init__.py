"""Fitting the iso-depth law L = E + A·(N_once + r^φ·N_rec)^(−α) + B·D^(−β) (method §8). NumPy/SciPy only."""

from loopscale.fit.analyses import compute_optimal, equivalence, loop_worth, n_eff, parabola_minima
from loopscale.fit.bootstrap import bootstrap_fit, compare_phi
from loopscale.fit.diagnostics import diagnose
from loopscale.fit.fitter import LawFit, fit_law
from loopscale.fit.plots import plot_protocol
from loopscale.fit.profile import profile_phi
from loopscale.fit.protocol import Protocol, run_protocol
from loopscale.fit.table import RunTable, load_table
from loopscale.fit.template import load_template, template_for_table

__all__ = [
    "LawFit",
    "Protocol",
    "RunTable",
    "bootstrap_fit",
    "compare_phi",
    "compute_optimal",
    "diagnose",
    "equivalence",
    "fit_law",
    "load_table",
    "load_template",
    "loop_worth",
    "n_eff",
    "parabola_minima",
    "plot_protocol",
    "profile_phi",
    "run_protocol",
    "template_for_table",
]
