"""The recipe changes ``price``, ``demo`` and ``design --reuse`` know, as the sweep-group keys that make a
variant of the base's template (method §9.11 for the paper's two; docs/model.md and docs/training.md for
the three of issue 41). Each is a minimal swap: everything else stays the base run's, so the pairs match."""

RECIPES = {
    "hyperconnections": {"model": {"injection": "hyperconnect"}},
    "truncated-bptt": {"bptt": "ceil_half"},
    # the recipes priced in issue 41 (docs/model.md, docs/training.md): each a minimal swap on the template
    "parcae": {"model": {"injection": "parcae"}},
    "parcae-diag": {"model": {"injection": "parcae-diag"}},
    # Parcae with the first loop started from 0 or from Parcae's own noise instead of e (issue 51)
    "parcae-zero": {"model": {"injection": "parcae", "loop_init": "zero"}},
    "parcae-random": {"model": {"injection": "parcae", "loop_init": "random"}},
    "sampled-depth": {"train": {"depth_sampling": "poisson-lognormal"}},
    "curriculum": {"train": {"loop_curriculum": "linear:0.25"}},
}
