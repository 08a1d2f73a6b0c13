"""The sentences about whether φ is identified (``fit.protocol_results.Diagnostics``), how its profile
interval was made and where it disagrees with the bootstrap CI, and why R² can rank forms differently
from the minimised objective: one function per sentence, from the records' codes and numbers."""

from __future__ import annotations

import math

from loopscale.fit.identification_results import Diagnostics, FormRanking, IntervalDisagreement, PhiFlag
from loopscale.fit.law import HUBER_DELTA, LOWER, PARAM_LABELS, PHI, UPPER
from loopscale.present.numbers import interval

_DELTA = "1e-3" if HUBER_DELTA == 1e-3 else f"{HUBER_DELTA:g}"
_PRETTY = {"alpha": "α", "beta": "β"}


def profile_method() -> str:
    """How the profile-likelihood interval is made (``fit.profile``)."""
    return (
        "profile likelihood: phi fixed on a grid over [-3, 3], the other five parameters refitted by least "
        "squares on log loss; deviance = n*log(RSS(phi)/RSS_min) (Gaussian errors, variance profiled out), "
        "interval where deviance <= chi2_1(level)"
    )


def disagreement_text(d: IntervalDisagreement) -> str:
    """Where φ's bootstrap CI and profile interval disagree, and why that can happen."""
    pct = f"{100 * d.level:.0f}%"
    boot = f"the {pct} bootstrap CI {interval(d.bootstrap)}"
    prof = f"the {pct} profile interval {interval(d.profile)}"
    if d.kind == "open_end":
        which, other = (prof, boot) if d.open_one == "profile" else (boot, prof)
        return (
            f"{_capital(which)} is open at its {d.ends[0]} end (it reaches the edge of the fit box) while "
            f"{other} is not, so the two methods disagree on whether φ is bounded there."
        )
    return (
        f"{_capital(boot)} and {prof} differ at the {' and '.join(d.ends)} end by more than a quarter of the "
        "wider one's width: the bootstrap resamples whole (budget, r) cells and so also counts misfit shared "
        "within a cell, while the profile assumes independent Gaussian errors."
    )


def objective_note(ranking: FormRanking | None) -> str:
    """Why R² (squared error in nats) can rank forms differently from the minimised objective, naming the
    pair of forms where it does (``ranking``)."""
    note = (
        "R² is 1 − Σ(L − L̂)²/Σ(L − L̄)² on raw losses (squared error in nats), but the fit minimises the "
        f"summed Huber (δ = {_DELTA}) of log-loss residuals, close to an absolute-error sum at these "
        "residuals, so the two can rank forms differently"
    )
    if ranking is not None:
        note += (
            f"; here {ranking.worse} has the higher R² ({ranking.r2_worse:.4f} vs {ranking.r2_better:.4f}) "
            f"but the worse objective ({ranking.objective_worse:.4g} vs {ranking.objective_better:.4g})"
        )
    return note + "."


def identification_reasons(diag: Diagnostics) -> list[str]:
    """The flags, one short line each: why φ is not identified, then the other parameters on an edge."""
    lines = [_flag_short(flag) for flag in diag.phi_flags]
    return lines + [f"{b.name} at its {b.side} bound ({_bound_value(b.name, b.side)})" for b in diag.bounds]


def identification_verdict(diag: Diagnostics) -> str:
    """The verdict the report leads its fit output with: is φ identified, and by what."""
    shape = diag.shape
    shape_clause = ""
    if shape:
        verb = "sits" if len(shape) == 1 else "sit"
        shape_clause = (
            f"; {_names(shape)} {verb} on the edge of the fit box, so the law's shape is not pinned down"
        )
    if diag.verdict == "plain":
        lead = f"Plain Chinchilla law (no φ) on {diag.n_runs} runs"
        text = (
            f"{lead}{shape_clause}." if shape_clause else f"{lead}: every parameter lies inside the fit box."
        )
    elif diag.verdict == "not_identified":
        text = (
            f"φ is not identified by these runs: {_flag_long(diag.phi_flags[0])}, so they cannot say what a "
            f"loop is worth{shape_clause}."
        )
    elif diag.verdict == "identified_given_shape":
        sides = {b.name: b.side for b in diag.bounds}
        where = ", ".join(_bound_value(n, sides[n]) for n in shape)
        verb = "its bound" if len(shape) == 1 else "their bounds"
        text = (
            f"φ is identified only given {_names(shape)} at {verb} ({where}): "
            f"φ = {diag.phi:.3f} is conditional on where the fit box was drawn, not a "
            f"measurement; the runs do not determine {_names(shape)} (fix it from a prior, or add runs "
            "that do)."
        )
    else:
        parts = []
        if diag.bootstrap_ci is not None:
            lo, hi = diag.bootstrap_ci
            parts.append(f"{100 * diag.bootstrap_level:.0f}% bootstrap CI [{lo:.3f}, {hi:.3f}]")
        if diag.profile_interval is not None:
            lo, hi = diag.profile_interval
            parts.append(f"profile interval [{lo:.3f}, {hi:.3f}]")
        detail = f" ({', '.join(parts)})" if parts else ""
        fixed = (
            ""
            if diag.fixed_phi is None
            else f" by the φ-free fit (the main fit fixes φ = {diag.fixed_phi:g})"
        )
        caveat = "; the bootstrap and profile intervals disagree, so read the width with care"
        text = f"φ is identified{fixed}: {diag.phi:.3f}{detail}{caveat if diag.intervals_disagree else ''}."
    if diag.held:  # φ is conditional on the parameters held (--fix/--prior)
        text = f"{text[:-1]} (given {_names(diag.held)} held fixed, not fitted)."
    return text


def _flag_short(flag: PhiFlag) -> str:
    if flag.kind == "phi_at_bound":
        return f"phi at its {flag.side} bound ({flag.phi:.3f})"
    if flag.kind == "profile_open":
        side = " and ".join(s for s, o in zip(("below", "above"), flag.open) if o)
        return f"profile interval open {side} (deviance stays under {flag.threshold:.2f} to the box edge)"
    if flag.kind == "bootstrap_ci_at_bound":
        return f"bootstrap CI {interval(flag.interval)} touches a bound"
    if flag.kind == "bootstrap_share":
        return (
            f"{flag.refits} of {flag.resamples} bootstrap refits ({100 * flag.share:.0f}%) put phi at a bound"
        )
    name = "bootstrap CI" if flag.source == "bootstrap" else "profile interval"
    return f"{name} {interval(flag.interval)} contains both phi = 0 and phi = 1"


def _flag_long(flag: PhiFlag) -> str:
    """The flag in plain words, as the verdict gives it."""
    if flag.kind == "phi_at_bound":
        return (
            f"the best fit puts φ on the edge of the allowed range [{LOWER[PHI]:g}, {UPPER[PHI]:g}] "
            f"(φ = {flag.phi:.3f})"
        )
    if flag.kind == "profile_open":
        lo, hi = flag.interval
        lo_txt = f"{LOWER[PHI]:g} (the edge)" if lo is None else f"{lo:.2f}"
        hi_txt = f"{UPPER[PHI]:g} (the edge)" if hi is None else f"{hi:.2f}"
        return f"every φ from {lo_txt} to {hi_txt} fits about as well as the best one"
    if flag.kind == "bootstrap_ci_at_bound":
        return (
            f"its {100 * flag.level:.0f}% bootstrap CI {interval(flag.interval, 2)} runs to the edge of the "
            "allowed range"
        )
    if flag.kind == "bootstrap_share":
        return f"{flag.refits} of {flag.resamples} bootstrap refits put φ on the edge of the allowed range"
    name = f"{100 * flag.level:.0f}% bootstrap CI" if flag.source == "bootstrap" else "profile interval"
    return (
        f"its {name} {interval(flag.interval, 2)} contains both φ = 0 (a loop adds nothing) and φ = 1 "
        "(a loop is worth a unique block)"
    )


def _bound_value(label: str, side: str) -> str:
    i = PARAM_LABELS.index(label)
    edge = LOWER[i] if side == "lower" else UPPER[i]
    if label in ("A", "B", "E"):
        return f"{label} = e^{edge:g} = {math.exp(edge):.4g}"
    return f"{label} = {edge:g}"


def _names(names) -> str:
    pretty = [_PRETTY.get(n, n) for n in names]
    return pretty[0] if len(pretty) == 1 else ", ".join(pretty[:-1]) + " and " + pretty[-1]


def _capital(text: str) -> str:
    return text[0].upper() + text[1:]
