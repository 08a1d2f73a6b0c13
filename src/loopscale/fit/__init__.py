"""Fitting the iso-depth law L = E + A·(N_once + r^φ·N_rec)^(−α) + B·D^(−β) (spec §8). NumPy/SciPy only."""

from loopscale.fit.analyses import compute_optimal, equivalence, loop_worth, n_eff, parabola_minima
from loopscale.fit.bootstrap import bootstrap_fit, compare_phi
from loopscale.fit.fitter import LawFit, fit_law
from loopscale.fit.plots import plot_protocol
from loopscale.fit.protocol import Protocol, run_protocol
from loopscale.fit.table import RunTable, load_table

__all__ = [
    "LawFit",
    "Protocol",
    "RunTable",
    "bootstrap_fit",
    "compare_phi",
    "compute_optimal",
    "equivalence",
    "fit_law",
    "load_table",
    "loop_worth",
    "n_eff",
    "parabola_minima",
    "plot_protocol",
    "run_protocol",
]
