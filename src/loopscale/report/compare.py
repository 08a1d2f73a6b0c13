"""The case-study section of a variant sweep's report: Δφ against the base sweep it reuses (``compare``).

A sweep whose spec ``reuse``s a base sweep's r = 1 runs is a case study (a recipe change measured against
that base). Its report leads with the verdict of ``pairs.case_study.compare_arms``, writes compare.json beside
fit.json, and draws two figures: Δφ per budget with its intervals (the pooled shared estimate as a band, the
paper's effect as a line), and the iso-FLOP curves of both arms on one axis per budget.
"""

from __future__ import annotations

from pathlib import Path

from loopscale.fit.labels import flops_label
from loopscale.pairs.case_study_results import CaseStudy, OptimumShift
from loopscale.pairs.results import ModelFit, PairedEffects
from loopscale.paper import paper_effect
from loopscale.present.compare_text import (
    case_study_verdict,
    loss_change_text,
    mc_text,
    refusal_text,
    trend_label,
)
from loopscale.present.effect_text import (
    SHAPE_MEANING,
    delta_phi_story,
    design_text,
    effect_sentence,
    p_text,
    shape_text,
    wild_text,
)
from loopscale.present.law_check import law_headline
from loopscale.present.numbers import interval
from loopscale.report.document import Bullets, Image, Section, Table
from loopscale.report.figures import caption
from loopscale.report.formatting import num


def case_study_section(doc: CaseStudy, arms_figure: Path) -> Section:
    d, s = doc.delta_phi, doc.delta_phi_separate
    effect = paper_effect(doc.name)
    blocks: list = [f"**{case_study_verdict(doc)}**"]
    story = delta_phi_story(doc)
    if story:
        blocks.append(story[0].upper() + story[1:] + ".")
    if doc.effects is not None:
        blocks += effect_blocks(doc.effects)
    items = [
        f"Shared-nuisance estimate ({d.form} form, {d.n_runs} runs): Δφ = {d.estimate:+.3f} "
        + (
            "(no interval: no bootstrap)"
            if d.se is None
            else interval(d.ci, signed=True, missing="–")
            + f" (estimate ± t({d.t_df})·SE, SE {d.se:.3f} from a random-effects "
            f"bootstrap of {d.resamples} tables with error groups per arm; {p_text(d.p)}; "
            f"{mc_text(d)})"
        )
        + f"; F-test of Δφ = 0 (iid errors): F = {d.F_test.F:.2f}, {p_text(d.F_test.p)}.",
        f"The paper's estimate (each arm fitted on its own): φ {s.base_phi:.3f} → {s.variant_phi:.3f}, "
        f"Δφ = {s.estimate:+.3f} {interval(s.ci, signed=True, missing='–')} (paired cell bootstrap)"
        + (
            ""
            if effect is None
            else f"; the paper reports {effect[1]:+.3f} for {effect[0]} (0.453 → "
            f"{0.453 + effect[1]:.3f}), with no interval."
        ),
    ]
    if doc.delta_phi_paper_form is not None:
        q = doc.delta_phi_paper_form
        items.append(f"Under the paper's form instead: Δφ = {q.estimate:+.3f} (F-test {p_text(q.F_test.p)}).")
    if doc.trend is not None:
        t = doc.trend
        change = f"{trend_label(t)}: {t.estimate:+.3f} ({p_text(t.p)})"
        items.append(f"Does the variant change the trend? {change}.")
    if doc.power:
        items.append(
            "Power of the pairs' rule to name a Δφ of the paper's sizes (alone, simulated on this design "
            "with the errors these pairs show): "
            + ", ".join(f"Δφ = {k}: {v:.2f}" for k, v in doc.power.items())
            + "."
        )
    for arm, check in (doc.law_check or {}).items():
        items.append(f"Law check of the {arm} arm: **{check.verdict}** — {law_headline(check)}.")
    if doc.loss_change.matched:
        items.append(f"Loss change: {loss_change_text(doc.loss_change)}.")
    blocks.append(Bullets(items))
    blocks.append(
        Table(
            ["budget (FLOPs)", "Δφ", "95% CI", "runs", "refused because"],
            [
                [
                    flops_label(row.budget),
                    "–" if row.delta_phi is None else f"{row.delta_phi:+.3f}",
                    interval(row.ci, signed=True, missing="–"),
                    str(row.n),
                    refusal_text(row.reason),
                ]
                for row in doc.per_budget
            ],
        )
    )
    blocks.append(
        Table(
            [
                "budget (FLOPs)",
                "r",
                "N* base",
                "N* variant",
                "optimum (observed)",
                "N* ratio the chosen effect model implies",
                "loop tax base",
                "loop tax variant",
            ],
            _optimum_rows(doc),
        )
    )
    blocks.append(Image(arms_figure, caption(arms_figure)))
    return Section(f"Case study: {doc.name} against its base", blocks)


def effect_blocks(e: PairedEffects) -> list:
    """The matched-pair analysis: per r, the effect models, the tests, the shape left and the rule's
    calibration."""
    intro = (
        f"**Is it φ?** {e.n_pairs} seed-matched pairs (variant − base at the same budget, width, r and "
        f"seed; {e.plain_pairs} at r = 1) in {e.clusters} (r, width) clusters. The base law "
        f"({e.base_form} form; {e.base_resamples} bootstrap draws carry its uncertainty) predicts the "
        "part of each loss change that the variant's own N and D explain (the token part); the excess is "
        "fitted under the effect models. A change of φ must grow with r; an offset is the same at every r; "
        f"an every-model term moves plain models too. Chosen: **{e.chosen}** — {effect_sentence(e)}."
    )
    names = [m for m in e.models if m != "tokens only"]
    per_r = Table(
        ["r", "pairs", "loss change", "tokens (variant/base)", "token part", "excess", *names],
        [
            [
                r,
                str(v.pairs),
                f"{v.change:+.4f}",
                f"{v.token_ratio:.3f}x",
                f"{v.token_part:+.4f}",
                f"{v.excess:+.4f}",
                *(f"{v.predicted[m]:+.4f}" for m in names),
            ]
            for r, v in e.per_r.items()
        ],
    )
    per_width = Table(
        ["width", "models", "pairs", "loss change", "excess"],
        [
            [f"{row.width:.0f}", "looped" if row.looped else "r = 1", str(row.pairs), f"{row.change:+.4f}",
             f"{row.excess:+.4f}"]
            for row in e.per_width
        ],
    )  # fmt: skip

    def coef(m: ModelFit, key: str) -> str:
        if key not in m.ci:
            return "–"
        ci = interval(m.ci[key], signed=True, missing="–", open_ends=m.open_ends(key))
        return (
            f"{m.value(key):+.4f} {ci} (c {m.critical[key]:.2f}, "
            f"SE {m.se[key]:.4f}: pairs {m.se_pairs[key]:.4f}, base law {m.se_base_law[key]:.4f})"
        )

    keys = [(t, label) for t, label in (("every", "every model (nats)"), ("offset", "offset (nats)"),
                                        ("delta_phi", "Δφ")) if t in e.terms]  # fmt: skip
    models = Table(
        ["model", *(label for _, label in keys), "RSS (nats²)", "chosen"],
        [
            [
                name + (" (terms cancel)" if m.cancelling else ""),
                *(coef(m, t) for t, _ in keys),
                f"{m.rss:.5f}",
                "yes" if name == e.chosen else "",
            ]
            for name, m in e.models.items()
        ],
    )
    cal = e.calibration
    labels = list(next(iter(cal.values())).chosen)
    calibration = Table(
        ["truth (simulated)", *labels, "wrong attribution", "named, interval holds 0", "coverage"],
        [
            [
                f"{label}: " + (", ".join(f"{t} {v:+.3f}" for t, v in c.truth.items()) or "no excess"),
                *(f"{c.chosen[m]:.2f}" for m in labels),
                f"{c.wrong_attribution:.3f}",
                f"{c.disagreement:.3f}",
                ", ".join(f"{v:.3f}" for v in c.coverage.values()) or "–",
            ]
            for label, c in cal.items()
        ],
    )
    before_49 = not e.inverted  # its report re-renders as it was
    level = f"{100 * e.ci_level:{'.0f' if before_49 else '.3g'}}%"  # the verdict's own level (96.5%, not 97%)
    meaning = (
        f"Models: each term's estimate ± c·SE ({level}), c the critical value of the same Monte Carlo test "
        "that decides whether the term is named (so a named term's interval excludes 0), SE² = "
        "cluster-robust (CR1) variance over the pairs + variance across the base law's bootstrap draws."
        if before_49
        else f"Models: each term's estimate and the values its test does not reject ({level}; estimate "
        "± c·SE for a constant, Fieller-type for Δφ, open where the base law leaves ∂L/∂φ's scale too "
        "uncertain), c the critical value of the same Monte Carlo test that decides whether the term is "
        "named (so a named term's interval excludes 0), |t| = |estimate|/SE₀, SE₀² = cluster-robust (CR1) "
        "variance over the pairs + the base law's with the term at 0 (the model's fitted change and the "
        "(r, width) pattern it leaves, refitted under each bootstrap draw)."
    )
    note = (
        "Per r and per width: mean loss change and what each effect model predicts for it (token part + the "
        f"model's excess). {meaning} Calibration: the share of simulated tables on which the rule names each "
        "model, with each model (at its fit to these pairs, or Δφ alone at the paper's sizes) as the truth; "
        "coverage: the true model's intervals holding the true values."
    )
    details = Bullets([design_text(e)] + [text for text in (wild_text(e), e.trend and shape_text(e)) if text])
    shapes = Table(
        ["shape", "what it moves", "estimate", "96% interval", "lack of fit p", "describes the pairs"],
        [
            [row.shape, SHAPE_MEANING[row.shape], f"{row.estimate:+.4f}",
             interval(row.ci, signed=True, missing="–"), p_text(row.lack_of_fit_p),
             {True: "yes", False: "no", None: "–"}[row.consistent]]
            for row in e.shapes
        ],
    )  # fmt: skip
    return [intro, details, per_r, per_width, models, shapes, calibration, note]


def _optimum_rows(doc: CaseStudy) -> list[list[str]]:
    tax = doc.loop_tax
    base_tax, variant_tax = ({(g.budget, g.r): g.gap for g in gaps} for gaps in (tax.base, tax.variant))
    predicted = {}
    if doc.effects is not None:
        e = doc.effects
        predicted = {(row.budget, row.r): row.ratio.get(e.chosen) for row in e.predicted_shift}

    def implied(row: OptimumShift) -> str:
        ratio = predicted.get((row.budget, row.r))
        return "–" if ratio is None else f"{ratio:.3f}x"

    return [
        [
            flops_label(row.budget),
            str(row.r),
            num(row.base_n_star, "{:,.0f}"),
            num(row.variant_n_star, "{:,.0f}"),
            row.shift + ("" if row.ratio is None else f" ({row.ratio:.3f}x)"),
            implied(row),
            num(base_tax.get((row.budget, row.r)), "{:+.3f}"),
            num(variant_tax.get((row.budget, row.r)), "{:+.3f}"),
        ]
        for row in doc.optimum_shift
    ]
