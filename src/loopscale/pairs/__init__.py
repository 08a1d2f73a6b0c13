"""What a recipe does, read off seed-matched pairs against a base law (method §9.11; issues 36, 43, 49).

The law itself is ``loopscale.fit``'s; this package reads a variant's pairs through it. A newcomer finds
here, in pipeline order:

- ``comparable``: whether two tables can be paired at all (one line when not);
- ``effects``: the effect models (every model, offset, Δφ) fitted to the pairs' excess beyond tokens;
- ``rule``: the one calibrated test per term that names an effect, and its calibration by simulation;
- ``shapes``: the one-parameter shapes and their lack-of-fit tests, beyond the (r, width) heterogeneity;
- ``sequential``: the looks of ``loopscale price`` and their boundaries from the looks' joint distribution;
- ``compare`` / ``case_study``: two arms' laws fitted jointly (Δφ shared or not) and the case study;
- ``test_time``: the pairs at test-time loop counts;
- ``results`` / ``rule_results`` / ``case_study_results``: the typed records all of them return.

NumPy/SciPy only: nothing here imports torch.
"""

from loopscale.lazy import lazy_exports

_SOURCES = {
    "analyse_pairs": "effects",
    "compare_arms": "case_study",
    "PairedEffects": "results",
}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
