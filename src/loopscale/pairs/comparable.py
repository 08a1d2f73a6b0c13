"""Are a base and a variant comparable arms of ``loopscale compare`` (method §5.3)? Refuse them when not.

Δφ measures a recipe change: the two arms must be the same experiment apart from that change. A recipe may
change how the loops are trained or joined (``injection``, ``hc_lanes``, the BPTT window, the optimiser),
so those may differ; what they are measured on and the template their sizes come from may not. Each of
these is refused with a one-line ``UserError`` (the CLI exits 2):

1. the vocabulary (``vocab_size``) or the context length (``seq_len``) differs: the losses are not on one
   scale;
2. the template differs (``depth``, ``prelude``, ``coda``, ``head_dim``): N and FLOPs of a width and r
   come from another architecture;
3. the training data or the validation tokens differ (``train.data.path``, ``data.val_tokens``);
4. the same r = 1 run — one run name at one (budget, width, seed) — in both tables with a different loss
   or token count: the arms' anchors are not the same runs (the tables need a ``width`` column to tell; a
   table without a ``seed`` column holds one seed, as ``pairs.effects.match_pairs`` pairs it). A variant
   r = 1 run under another name at a base r = 1 run's (budget, width, seed) is the
   variant's own plain run: it pairs with the base's (``pairs.effects``), it does not clash;
5. r = 1 runs of one width with different sizes N in the two tables: another architecture.

1-3 read each arm's setup from the sweep it came from: the ``sweep.yaml`` next to its table (the groups
that ran the table's runs: a run's name starts with its group's), else the ``runs/NAME/config.yaml`` (or
``run.yaml``) of its runs (``fit.template``'s sources); keys a spec leaves out take the defaults of
``ModelConfig`` / ``DataConfig``. Where either arm has neither, 1-3 cannot be checked: a note says so.
4-5 need the tables only (``check_tables`` here, which ``pairs.compare.make_arms`` runs on every pair); 1-3
read the arms' configs (``analysis.comparable.check_setups``: fit/ reads no run configs).

NumPy only: the CLI runs these checks before SciPy loads and before any fitting.
"""

from __future__ import annotations

import math

import numpy as np

from loopscale.errors import UserError
from loopscale.fit.table import RunTable


def _r1_rows(t: RunTable) -> np.ndarray:
    return np.flatnonzero(t.r == 1)


def _seed(t: RunTable, i: int) -> float:
    """Run ``i``'s seed; −1 (one seed, as ``pairs.effects.match_pairs`` reads it) where the table has none."""
    return -1.0 if math.isnan(t.seed[i]) else float(t.seed[i])


def _seed_text(t: RunTable, i: int) -> str:
    return "no seed column" if math.isnan(t.seed[i]) else f"seed {t.seed[i]:.0f}"


def check_tables(base: RunTable, variant: RunTable) -> None:
    """Refuse what the two tables alone show incomparable (checks 4-5 of the module docstring)."""
    b1, v1 = _r1_rows(base), _r1_rows(variant)
    sizes: dict[float, tuple[float, str]] = {}
    for i in b1:
        if math.isfinite(base.width[i]):
            sizes.setdefault(float(base.width[i]), (float(base.n[i]), str(base.run[i])))
    for i in v1:
        if not math.isfinite(variant.width[i]) or float(variant.width[i]) not in sizes:
            continue
        n_base, run_base = sizes[float(variant.width[i])]
        if not math.isclose(float(variant.n[i]), n_base, rel_tol=1e-9):
            raise UserError(
                f"the arms' r = 1 runs of width d = {variant.width[i]:.0f} differ in size: base {run_base} "
                f"N = {n_base:,.0f}, variant {variant.run[i]} N = {variant.n[i]:,.0f}: another architecture, "
                "not a recipe change; compare arms built on one template"
            )
    runs: dict[tuple[float, float, float, str], int] = {}
    for i in b1:
        key = (float(base.budget[i]), float(base.width[i]), _seed(base, i), str(base.run[i]))
        if all(math.isfinite(k) for k in key[:2]):
            runs.setdefault(key, i)
    for i in v1:
        j = runs.get(
            (float(variant.budget[i]), float(variant.width[i]), _seed(variant, i), str(variant.run[i]))
        )
        if j is None:  # not the base's run: the variant's own plain run (a pair) or unmatched
            continue
        differ = [
            f"{name} {v:{fmt}} vs {b:{fmt}}"
            for name, v, b, fmt in (
                ("loss", variant.loss[i], base.loss[j], ".5f"),
                ("tokens", variant.tokens[i], base.tokens[j], ",.0f"),
            )
            if not math.isclose(float(v), float(b), rel_tol=1e-9)
        ]
        if differ:
            raise UserError(
                f"the variant's r = 1 run {variant.run[i]} (C = {variant.budget[i]:.3g}, d = "
                f"{variant.width[i]:.0f}, {_seed_text(variant, i)}) clashes with the base's {base.run[j]}: "
                f"{', '.join(differ)}: the arms' r = 1 anchors must be the same runs; drop or rerun it"
            )
