"""``loopscale compare``'s document: Δφ of a recipe change and what else the two arms show.

``compare_arms`` runs the estimates of ``pairs.compare`` (shared-nuisance Δφ under the base's selected law
form, the paper's separate fits, Δφ per budget, the change of a φ trend) and adds what a reader weighs them
with: the law check of each arm, the loss change of every looped run at matched (budget, width, r), the
shift of the iso-FLOP optimum per (budget, r), the loop tax per arm, and the design's power: a
``fit.case_study_results.CaseStudy``, whose ``to_dict()`` is compare.json. ``present.compare_text`` writes
its sentences (``format_compare``: the whole document as text, verdict first).
"""

from __future__ import annotations

import math

import numpy as np

from loopscale.errors import UserError
from loopscale.fit.analyses import cell_gaps, parabola_minima
from loopscale.fit.fitter import fit_law
from loopscale.fit.priors import Held, fixed_settings
from loopscale.fit.protocol_results import CellGap
from loopscale.fit.table import RunTable
from loopscale.pairs.case_study_results import (
    ArmsLoopTax,
    CaseRuns,
    CaseStudy,
    CompareSettings,
    LossCell,
    LossChange,
    OptimumShift,
    PaperFormDelta,
    PaperReference,
)
from loopscale.pairs.compare import (
    Arms,
    delta_phi_separate,
    delta_phi_shared,
    make_arms,
    per_budget,
    shared_model,
    trend_change,
)
from loopscale.pairs.effects import analyse_pairs
from loopscale.pairs.results import PairedEffects
from loopscale.pairs.rule import REFERENCE_EFFECTS
from loopscale.paper import PAPER_EFFECTS

TREND_FORMS = ("phi-trend-c", "phi-trend-n")
SAME_OPTIMUM = 0.01  # |log N* ratio| below which the optimum has not moved (1%)


def _cell_means(t: RunTable) -> dict[tuple[float, int, int], float]:
    """Mean loss per (budget, width, r) over seeds (nats)."""
    groups: dict[tuple[float, int, int], list[float]] = {}
    for b, w, r, loss in zip(t.budget, t.width, t.r, t.loss):
        groups.setdefault((float(b), int(w), int(r)), []).append(float(loss))
    return {k: float(np.mean(v)) for k, v in groups.items()}


def loss_changes(arms: Arms) -> LossChange:
    """Variant − base loss (nats) of every looped (budget, width, r) both arms ran (means over seeds)."""
    base = _cell_means(arms.base_table.subset(arms.base_table.r > 1))
    variant = _cell_means(arms.variant_table.subset(arms.variant_table.r > 1))
    rows = tuple(
        LossCell(k[0], k[1], k[2], base[k], variant[k], variant[k] - base[k])
        for k in sorted(set(base) & set(variant))
    )
    changes = np.array([row.change for row in rows])
    per_r = {
        str(r): float(np.mean([row.change for row in rows if row.r == r]))
        for r in sorted({row.r for row in rows})
    }
    mean = float(changes.mean()) if rows else None
    return LossChange(rows, len(rows), int((changes < 0).sum()), mean, per_r)


def optimum_shift(arms: Arms) -> list[OptimumShift]:
    """Per (budget, r > 1): the iso-FLOP optimum N* of each arm (parabola vertex in log N, bracketed only)
    and the direction the variant moves it: "wider", "narrower", "unchanged" (within 1% in N*), or "not
    bracketed" (either arm's vertex outside its runs, or its lowest run at an end of the widths)."""
    minima = {
        name: {(m.budget, m.r): m for m in parabola_minima(t)}
        for name, t in (("base", arms.base_table), ("variant", arms.variant_table))
    }
    rows = []
    for key in sorted(set(minima["base"]) & set(minima["variant"])):
        if key[1] == 1:
            continue
        b, v = minima["base"][key], minima["variant"][key]
        ratio, shift = None, "not bracketed"
        if b.bracketed and v.bracketed and b.runs_bracket and v.runs_bracket:
            ratio = v.n_star / b.n_star
            shift = (
                "unchanged" if abs(math.log(ratio)) < SAME_OPTIMUM else ("wider" if ratio > 1 else "narrower")
            )
        rows.append(OptimumShift(key[0], key[1], b.n_star, v.n_star, ratio, shift))
    return rows


def loop_tax(t: RunTable) -> tuple[CellGap, ...]:
    """L*(r) − L*(r = 1) per budget (nats; iso-FLOP minima, bracketed cells only)."""
    return cell_gaps(parabola_minima(t))


def _effect_power(e: PairedEffects) -> dict[str, float]:
    """Power of the pairs' rule to name a Δφ of each reference size alone (simulated on this design)."""
    return {
        f"{d:+.2f}": e.calibration[f"delta phi = {d:+.2f}"].power
        for d in REFERENCE_EFFECTS
        if f"delta phi = {d:+.2f}" in e.calibration
    }


def compare_arms(
    base: RunTable,
    variant: RunTable,
    *,
    name: str = "variant",
    form: str = "auto",
    restarts: int = 500,
    resamples: int = 200,
    bootstrap_restarts: int = 10,
    seed: int = 0,
    noise: float | None = None,
    law_check: bool = True,
    advance=None,
    held: Held | None = None,
) -> CaseStudy:
    """The case study (see the module docstring). ``form`` "auto": the base's selected form when its law
    check rejects the paper's law, else the paper's; ``noise``: run-to-run noise (nats) for law checks of
    tables without replicates; ``advance(k)``: progress callback (bootstrap refits); ``held``
    (``fit.priors.build_held``): shared parameters held in every fit and refit of both arms, a prior's draws
    resampled per refit; the law checks are then skipped (note "no_law_check")."""
    from loopscale.fit.lawcheck import check_law

    arms = make_arms(base, variant)
    checks, notes = {}, ["no_law_check"] if law_check and held else []
    if law_check and not held:
        for arm, t in (("base", arms.base_table), ("variant", arms.variant_table)):
            fit = fit_law(t, restarts=restarts, seed=seed)
            checks[arm] = check_law(t, fit, noise=noise, resamples=0, seed=seed)
    if form == "auto":
        form = checks["base"].selected_form if checks else "paper"
    settings = {"restarts": restarts, "bootstrap_restarts": bootstrap_restarts, "seed": seed}
    shared = delta_phi_shared(arms, form, resamples=resamples, advance=advance, held=held, **settings)
    model, theta = shared_model(arms, form, held=held), np.array(shared.theta)
    effects = _pairs(arms, form, restarts, resamples, seed, held)
    if effects is None:
        notes.append("no_pairs")
    paper_form = None
    if form != "paper":
        paper = delta_phi_shared(arms, "paper", resamples=0, held=held, **settings)
        paper_form = PaperFormDelta(paper.estimate, paper.F_test, paper.phi)
    return CaseStudy(
        name=name,
        delta_phi=shared,
        delta_phi_paper_form=paper_form,
        delta_phi_separate=delta_phi_separate(
            arms, resamples=resamples, advance=advance, held=held, **settings
        ),
        per_budget=tuple(per_budget(arms, model, theta, resamples, seed)),
        trend=trend_change(arms, form, theta, restarts=max(20, restarts // 10), seed=seed, held=held)
        if form in TREND_FORMS
        else None,
        law_check=checks or None,
        loss_change=loss_changes(arms),
        optimum_shift=tuple(optimum_shift(arms)),
        loop_tax=ArmsLoopTax(loop_tax(arms.base_table), loop_tax(arms.variant_table)),
        effects=effects,
        power={} if effects is None else _effect_power(effects),
        runs=CaseRuns(
            base=len(arms.base_table),
            variant=int(arms.variant.sum()),
            anchors=int((arms.variant_table.r == 1).sum()),
            shared_anchors=arms.shared_anchors,
            own_plain=arms.own_plain,
            budgets=tuple(sorted(set(arms.table.budget.tolist()))),
        ),
        paper=PaperReference(PAPER_EFFECTS, 0.453),
        settings=CompareSettings(
            **settings,
            resamples=resamples,
            form=form,
            noise=noise,
            fixed=fixed_settings(held, None).to_dict(),
            prior=None if held is None else held.prior,
        ),
        notes=tuple(notes),
    )


def _pairs(
    arms: Arms, form: str, restarts: int, resamples: int, seed: int, held: Held | None
) -> PairedEffects | None:
    """The matched-pair analysis under the base law of ``form``; None for tables without matched pairs
    (the shared fit alone: note "no_pairs")."""
    try:
        base_fit = fit_law(
            arms.base_table, restarts=restarts, seed=seed, extension=None if form == "paper" else form,
            held=held.theta if held else None,
        )  # fmt: skip
        effects = analyse_pairs(
            arms.base_table, arms.variant_runs, base_fit, base_resamples=resamples, seed=seed
        )
    except UserError:
        return None
    return effects
