"""Fitting the iso-depth law L = E + A·(N_once + r^φ·N_rec)^(−α) + B·D^(−β) (method §8). NumPy/SciPy only.

The names below load their submodule on first use (PEP 562), so ``from loopscale.fit.table import
load_table`` (NumPy only) stays cheap: SciPy loads when a fit needs it. Figures are drawn by
``loopscale.present.plots``.
"""

from loopscale.lazy import lazy_exports

# public name → the submodule that defines it
_SOURCES = {
    "compute_optimal": "analyses",
    "equivalence": "analyses",
    "loop_worth": "analyses",
    "n_eff": "analyses",
    "parabola_minima": "analyses",
    "bootstrap_fit": "bootstrap",
    "diagnose": "diagnostics",
    "LawFit": "fitter",
    "fit_law": "fitter",
    "profile_phi": "profile",
    "Protocol": "protocol",
    "read_protocol": "protocol",
    "run_protocol": "protocol",
    "ProtocolResult": "protocol_results",
    "RunTable": "table",
    "load_table": "table",
    "load_template": "template",
    "template_for_table": "template",
}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
