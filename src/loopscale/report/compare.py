"""The case-study section of a variant sweep's report: Δφ against the base sweep it reuses (``compare``).

A sweep whose spec ``reuse``s a base sweep's r = 1 runs is a case study (a recipe change measured against
that base). Its report leads with the verdict of ``fit.case_study.compare_arms``, writes compare.json beside
fit.json, and draws two figures: Δφ per budget with its intervals (the pooled shared estimate as a band, the
paper's effect as a line), and the iso-FLOP curves of both arms on one axis per budget.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loopscale.fit.case_study import compare_arms, loss_change_text, mc_text, to_json
from loopscale.fit.compare import PAPER_EFFECTS, make_arms
from loopscale.fit.effect_text import (
    SHAPE_MEANING,
    delta_phi_story,
    design_text,
    effect_sentence,
    p_text,
    shape_text,
    wild_text,
)
from loopscale.fit.labels import flops_label
from loopscale.fit.table import RunTable
from loopscale.report.document import Bullets, Image, Section, Table
from loopscale.report.figures import caption, save_figure
from loopscale.report.formatting import num


def paper_effect(name: str) -> tuple[str, float] | None:
    """The paper's Δφ for a variant whose name says which case study it is (method §9.11)."""
    lowered = name.lower()
    for key, value in PAPER_EFFECTS.items():
        if key.split()[0].lower()[:8] in lowered.replace("-", " "):
            return key, value
    return None


def case_study(
    base: RunTable, variant: RunTable, name: str, out_dir: Path, **settings
) -> tuple[dict, Section, list[Image]]:
    """Run ``compare_arms``; (compare.json's content, the section, the figures for the first screen: the
    loss change per r with the effect models' curves, and Δφ per budget), the figures written under
    ``out_dir``."""
    doc = compare_arms(base, variant, name=name, **settings)
    key = [delta_phi_figure(doc, out_dir / "delta_phi_per_budget")]
    if doc.get("effects"):
        key[:0] = [
            effects_figure(doc, out_dir / "loss_change_by_r"),
            excess_width_figure(doc, out_dir / "excess_by_width"),
        ]
    arms = isoflop_arms_figure(make_arms(base, variant), out_dir / "isoflop_arms")
    return to_json(doc), _section(doc, arms), [Image(path, caption(path)) for path in key]


def _ci(ci) -> str:
    return "–" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def _section(doc: dict, arms_figure: Path) -> Section:
    d, s = doc["delta_phi"], doc["delta_phi_separate"]
    effect = paper_effect(doc["name"])
    blocks: list = [f"**{doc['verdict']}**"]
    story = delta_phi_story(doc)
    if story:
        blocks.append(story[0].upper() + story[1:] + ".")
    if doc.get("effects"):
        blocks += effect_blocks(doc["effects"])
    items = [
        f"Shared-nuisance estimate ({d['form']} form, {d['n_runs']} runs): Δφ = {d['estimate']:+.3f} "
        + (
            "(no interval: no bootstrap)"
            if d["se"] is None
            else f"{_ci(d['ci'])} (estimate ± t({d['t_df']})·SE, SE {d['se']:.3f} from a random-effects "
            f"bootstrap of {d['resamples']} tables with error groups per arm; {p_text(d['p'])}; "
            f"{mc_text(d)})"
        )
        + f"; F-test of Δφ = 0 (iid errors): F = {d['F_test']['F']:.2f}, {p_text(d['F_test']['p'])}.",
        f"The paper's estimate (each arm fitted on its own): φ {s['base_phi']:.3f} → {s['variant_phi']:.3f}, "
        f"Δφ = {s['estimate']:+.3f} {_ci(s['ci'])} (paired cell bootstrap)"
        + (
            ""
            if effect is None
            else f"; the paper reports {effect[1]:+.3f} for {effect[0]} (0.453 → "
            f"{0.453 + effect[1]:.3f}), with no interval."
        ),
    ]
    if doc["delta_phi_paper_form"] is not None:
        q = doc["delta_phi_paper_form"]
        items.append(
            f"Under the paper's form instead: Δφ = {q['estimate']:+.3f} (F-test {p_text(q['F_test']['p'])})."
        )
    if doc["trend"] is not None:
        t = doc["trend"]
        items.append(
            f"Does the variant change the trend? {t['label']}: {t['estimate']:+.3f} ({p_text(t['p'])})."
        )
    if doc["power"]:
        items.append(
            "Power of the pairs' rule to name a Δφ of the paper's sizes (alone, simulated on this design "
            "with the errors these pairs show): "
            + ", ".join(f"Δφ = {k}: {v:.2f}" for k, v in doc["power"].items())
            + "."
        )
    for arm, check in (doc["law_check"] or {}).items():
        items.append(f"Law check of the {arm} arm: **{check['verdict']}** — {check['headline']}.")
    if doc["loss_change"]["matched"]:
        items.append(f"Loss change: {loss_change_text(doc['loss_change'])}.")
    blocks.append(Bullets(items))
    blocks.append(
        Table(
            ["budget (FLOPs)", "Δφ", "95% CI", "runs", "refused because"],
            [
                [
                    flops_label(row["budget"]),
                    "–" if row["delta_phi"] is None else f"{row['delta_phi']:+.3f}",
                    _ci(row["ci"]),
                    str(row["n"]),
                    row.get("reason") or "",
                ]
                for row in doc["per_budget"]
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
    return Section(f"Case study: {doc['name']} against its base", blocks)


def effect_blocks(e: dict) -> list:
    """The matched-pair analysis: per r, the effect models, the tests, the shape left and the rule's
    calibration."""
    intro = (
        f"**Is it φ?** {e['n_pairs']} seed-matched pairs (variant − base at the same budget, width, r and "
        f"seed; {e['plain_pairs']} at r = 1) in {e['clusters']} (r, width) clusters. The base law "
        f"({e['base_form']} form; {e['base_resamples']} bootstrap draws carry its uncertainty) predicts the "
        "part of each loss change that the variant's own N and D explain (the token part); the excess is "
        "fitted under the effect models. A change of φ must grow with r; an offset is the same at every r; "
        f"an every-model term moves plain models too. Chosen: **{e['chosen']}** — {effect_sentence(e)}."
    )
    names = [m for m in e["models"] if m != "tokens only"]
    per_r = Table(
        ["r", "pairs", "loss change", "tokens (variant/base)", "token part", "excess", *names],
        [
            [
                r,
                str(v["pairs"]),
                f"{v['change']:+.4f}",
                f"{v['token_ratio']:.3f}x",
                f"{v['token_part']:+.4f}",
                f"{v['excess']:+.4f}",
                *(f"{v['predicted'][m]:+.4f}" for m in names),
            ]
            for r, v in e["per_r"].items()
        ],
    )
    per_width = Table(
        ["width", "models", "pairs", "loss change", "excess"],
        [
            [f"{row['width']:.0f}", "looped" if row["looped"] else "r = 1", str(row["pairs"]),
             f"{row['change']:+.4f}", f"{row['excess']:+.4f}"]
            for row in e["per_width"]
        ],
    )  # fmt: skip

    def coef(m: dict, key: str) -> str:
        if key not in m["ci"]:
            return "–"
        return (
            f"{m[key]:+.4f} {_ci(m['ci'][key])} (c {m['critical'][key]:.2f}, SE {m['se'][key]:.4f}: pairs "
            f"{m['se_pairs'][key]:.4f}, base law {m['se_base_law'][key]:.4f})"
        )

    keys = [(t, label) for t, label in (("every", "every model (nats)"), ("offset", "offset (nats)"),
                                        ("delta_phi", "Δφ")) if t in e["terms"]]  # fmt: skip
    models = Table(
        ["model", *(label for _, label in keys), "RSS (nats²)", "chosen"],
        [
            [
                name + (" (terms cancel)" if m["cancelling"] else ""),
                *(coef(m, t) for t, _ in keys),
                f"{m['rss']:.5f}",
                "yes" if name == e["chosen"] else "",
            ]
            for name, m in e["models"].items()
        ],
    )
    cal = e["calibration"]
    labels = list(next(iter(cal.values()))["chosen"])
    calibration = Table(
        ["truth (simulated)", *labels, "wrong attribution", "named, interval holds 0", "coverage"],
        [
            [
                f"{label}: " + (", ".join(f"{t} {v:+.3f}" for t, v in c["truth"].items()) or "no excess"),
                *(f"{c['chosen'][m]:.2f}" for m in labels),
                f"{c['wrong_attribution']:.3f}",
                f"{c['disagreement']:.3f}",
                ", ".join(f"{v:.3f}" for v in c["coverage"].values()) or "–",
            ]
            for label, c in cal.items()
        ],
    )
    note = (
        "Per r and per width: mean loss change and what each effect model predicts for it (token part + the "
        f"model's excess). Models: each term's estimate ± c·SE ({100 * e['ci_level']:.0f}%), c the critical "
        "value of the same Monte Carlo test that decides whether the term is named (so a named term's "
        "interval excludes 0), SE² = cluster-robust (CR1) variance over the pairs + variance across the base "
        "law's bootstrap draws. Calibration: the share of simulated tables on which the rule names each "
        "model, with each model (at its fit to these pairs, or Δφ alone at the paper's sizes) as the truth; "
        "coverage: the true model's intervals holding the true values."
    )
    details = Bullets(
        [design_text(e)] + [text for text in (wild_text(e), e["trend"] and shape_text(e)) if text]
    )
    shapes = Table(
        ["shape", "what it moves", "estimate", "96% interval", "lack of fit p", "describes the pairs"],
        [
            [row["shape"], SHAPE_MEANING[row["shape"]], f"{row['estimate']:+.4f}", _ci(row["ci"]),
             p_text(row["lack_of_fit_p"]), {True: "yes", False: "no", None: "–"}[row["consistent"]]]
            for row in e.get("shapes") or []
        ],
    )  # fmt: skip
    return [intro, details, per_r, per_width, models, shapes, calibration, note]


def excess_width_figure(doc: dict, stem: Path) -> Path:
    """The pairs' excess (beyond the token part) against width, per r, with each (r, width) cluster's mean
    and the chosen model's left-over slope along log width (``fit.effects.width_trend``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from loopscale.fit.plots import _r_colors

    e = doc["effects"]
    rows = e["pairs"]
    rs = sorted({row["r"] for row in rows})
    colors = _r_colors(rs)
    fig, ax = plt.subplots(figsize=(8.0, 4.4))
    rng = np.random.default_rng(0)
    for r in rs:
        pts = [row for row in rows if row["r"] == r]
        widths = np.array([row["width"] for row in pts])
        face = "white" if r == 1 else colors[r]
        x = widths * np.exp(rng.uniform(-0.03, 0.03, len(pts)))
        ax.plot(x, [row["excess"] for row in pts], "o", ms=3.5, alpha=0.5, color=colors[r], mfc=face)
        means = [
            (w, np.mean([row["excess"] for row in pts if row["width"] == w])) for w in sorted(set(widths))
        ]
        ax.plot(*zip(*means), "s-", color=colors[r], mfc=face, ms=6, lw=1.2, label=f"r = {r}: mean per width")
    trend = e.get("trend")
    if trend is not None:
        widths = np.array(sorted({row["width"] for row in rows}))
        centre = float(np.mean([row["excess"] for row in rows]))
        x = np.log10(widths) - np.mean(np.log10([k[1] for k in _cluster_keys(rows)]))
        ax.plot(widths, centre + trend["slope"] * x, "k--", lw=1.5,
                label=f"left-over slope {trend['slope']:+.3f} per decade {_ci(trend['ci'])}")  # fmt: skip
    ax.axhline(0.0, color="black", lw=0.7)
    ax.set_xscale("log")
    ax.minorticks_off()
    ticks = sorted({row["width"] for row in rows})
    ax.set_xticks(ticks, [f"{w:.0f}" for w in ticks])
    ax.set_xlabel("width d")
    ax.set_ylabel("excess beyond the token part (nats)")
    ax.set_title(f"{doc['name']}: is it one constant? excess per matched pair against width", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return save_figure(fig, stem)


def _cluster_keys(rows: list[dict]) -> list[tuple[int, float]]:
    return sorted({(row["r"], row["width"]) for row in rows})


def effects_figure(doc: dict, stem: Path) -> Path:
    """Loss change (variant − base) per matched pair against r, with the mean per r and the curves of each
    effect model (token part + the model's excess, mean per r)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    e = doc["effects"]
    rows = e["pairs"]
    rs = [int(r) for r in e["per_r"]]
    budgets = sorted({row["budget"] for row in rows})
    cmap = plt.get_cmap("viridis")
    fig, ax = plt.subplots(figsize=(8.0, 4.4))
    rng = np.random.default_rng(0)
    for i, c in enumerate(budgets):
        pts = [row for row in rows if row["budget"] == c]
        x = np.array([row["r"] for row in pts]) * np.exp(rng.uniform(-0.08, 0.08, len(pts)))
        color = cmap(i / max(len(budgets) - 1, 1))
        ax.plot(x, [row["change"] for row in pts], "o", ms=3.5, alpha=0.6, color=color,
                label=f"pairs at C = {flops_label(c)}")  # fmt: skip
    styles = {"tokens only": ("gray", ":"), "delta phi": ("tab:red", "--"), "offset": ("tab:blue", "-."),
              "offset + delta phi": ("tab:purple", "-")}  # fmt: skip
    shown = [name for name in e["models"] if name in styles or name == e["chosen"]]
    for name in shown:
        color, ls = styles.get(name, ("tab:green", "-"))
        y = [e["per_r"][str(r)]["predicted"][name] for r in rs]
        width = 2.6 if name == e["chosen"] else 1.3
        ax.plot(rs, y, ls, color=color, lw=width, label=f"model: {name}" + (" (chosen)" if name == e["chosen"]
                else ""))  # fmt: skip
    means = [e["per_r"][str(r)]["change"] for r in rs]
    sds = [e["per_r"][str(r)]["change_sd"] or np.nan for r in rs]  # one pair: no spread, no bar
    counts = [e["per_r"][str(r)]["pairs"] for r in rs]
    errors = [2 * sd / np.sqrt(n) for sd, n in zip(sds, counts)]
    ax.errorbar(rs, means, yerr=errors, fmt="s", color="black", ms=6, capsize=4, label="mean per r (±2 SE)")
    ax.axhline(0.0, color="black", lw=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xticks(rs, [str(r) for r in rs])
    ax.set_xlabel("loop count r")
    ax.set_ylabel("loss change, variant − base (nats)")
    ax.set_title(f"{doc['name']}: is it φ? loss change per matched pair; chosen: {e['chosen']}", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return save_figure(fig, stem)


def _optimum_rows(doc: dict) -> list[list[str]]:
    tax = {
        arm: {(g["budget"], g["r"]): g["gap"] for g in doc["loop_tax"][arm]} for arm in ("base", "variant")
    }
    e = doc.get("effects") or {}
    chosen = e.get("chosen")
    predicted = {(row["budget"], row["r"]): row["ratio"].get(chosen) for row in e.get("predicted_shift", [])}

    def implied(row: dict) -> str:
        ratio = predicted.get((row["budget"], row["r"]))
        return "–" if ratio is None else f"{ratio:.3f}x"

    return [
        [
            flops_label(row["budget"]),
            str(row["r"]),
            num(row["base_n_star"], "{:,.0f}"),
            num(row["variant_n_star"], "{:,.0f}"),
            row["shift"] + ("" if row.get("ratio") is None else f" ({row['ratio']:.3f}x)"),
            implied(row),
            num(tax["base"].get((row["budget"], row["r"])), "{:+.3f}"),
            num(tax["variant"].get((row["budget"], row["r"])), "{:+.3f}"),
        ]
        for row in doc["optimum_shift"]
    ]


def delta_phi_figure(doc: dict, stem: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in doc["per_budget"] if row["delta_phi"] is not None]
    d = doc["delta_phi"]
    fig, ax = plt.subplots(figsize=(8.0, 4.2))
    x = np.arange(len(rows))
    if d["ci"] is not None:
        ax.axhspan(d["ci"][0], d["ci"][1], color="tab:blue", alpha=0.15, label="pooled shared Δφ, 95% CI")
    ax.axhline(d["estimate"], color="tab:blue", lw=1.5, label=f"pooled Δφ = {d['estimate']:+.3f}")
    ax.axhline(0.0, color="black", lw=0.8)
    effect = paper_effect(doc["name"])
    if effect is not None:
        ax.axhline(effect[1], color="tab:red", ls="--", lw=1.2, label=f"paper: {effect[1]:+.3f}")
    est = np.array([row["delta_phi"] for row in rows])
    lo = np.array([row["ci"][0] if row["ci"] else v for row, v in zip(rows, est)])
    hi = np.array([row["ci"][1] if row["ci"] else v for row, v in zip(rows, est)])
    ax.errorbar(x, est, yerr=[est - lo, hi - est], fmt="o", color="black", capsize=4, label="per budget")
    ax.set_xticks(x, [flops_label(row["budget"]) for row in rows])
    ax.set_xlabel("compute budget C (FLOPs)")
    ax.set_ylabel("Δφ (variant − base)")
    ax.set_title(f"{doc['name']}: Δφ per budget")
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, stem)


def isoflop_arms_figure(arms, stem: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from loopscale.fit.plot_axes import log_axis, panel_grid
    from loopscale.fit.plots import _r_colors

    t = arms.table
    budgets = sorted(set(t.budget.tolist()))
    rs = sorted(set(t.r.tolist()))
    colors = _r_colors(rs)
    nrows, ncols = panel_grid(len(budgets), max_cols=4)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 3.0 * nrows), squeeze=False, sharey=False)
    for ax, c in zip(axes.flat, budgets):
        for r in rs:
            for variant, style, face in ((False, "-", None), (True, "--", "white")):
                mask = (t.budget == c) & (t.r == r) & (arms.variant == variant)
                if not mask.any():
                    continue
                order = np.argsort(t.n[mask])
                n, loss = t.n[mask][order], t.loss[mask][order]
                ax.plot(n, loss, style, color=colors[r], lw=1.0)
                ax.plot(n, loss, "o", color=colors[r], mfc=face or colors[r], ms=4)
        ax.set_xscale("log")
        log_axis(ax, "x")
        ax.set_title(f"C = {flops_label(c)}", fontsize=9)
        ax.set_xlabel("N (parameters)")
        ax.set_ylabel("loss (nats)")
    for ax in list(axes.flat)[len(budgets) :]:
        ax.axis("off")
    handles = [plt.Line2D([], [], color=colors[r], marker="o", label=f"r = {r}") for r in rs]
    handles += [
        plt.Line2D([], [], color="gray", ls="-", marker="o", label="base"),
        plt.Line2D([], [], color="gray", ls="--", marker="o", mfc="white", label="variant"),
    ]
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    return save_figure(fig, stem)
