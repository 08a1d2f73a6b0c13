"""Is φ identified? Parameters at the edge of the fit box, the verdict a report leads with (method §8.9).

A fit whose parameter sits on its box edge (within 1e-6, in the fitted parameterisation: e = log E, a, b,
α, β, φ) has not found an interior optimum: the data would have moved it further. φ is **not identified**
when any of these holds (each adds a line to ``reasons``):

- the φ-free joint fit puts φ at a bound;
- the bootstrap's φ CI touches a bound;
- more than 5% of the bootstrap refits put φ at a bound;
- the profile-likelihood interval (``fit.profile``) is open at an end;
- the bootstrap CI or the profile interval contains both φ = 0 (a loop adds nothing beyond the unique
  blocks it reuses) and φ = 1 (each loop is worth a full unique block): the runs cannot tell the two
  reference answers apart, even if the interval stops short of the box edge.

- the point fit puts a shape parameter (E, α or β) on its bound: φ is then conditional on where the box
  was drawn (its edge stands in for a value the runs do not determine), and a parametric bootstrap
  simulated from that fit cannot show it. The verdict says "identified only given E at its bound", never
  as a finding; the reported interval is then not the random-effects bootstrap (``fit.protocol``).

A and B at a bound are listed in ``reasons`` too (they do not by themselves make φ unidentified).
"""

from __future__ import annotations

import math

import numpy as np

from loopscale.fit.fitter import LawFit
from loopscale.fit.law import BOUND_TOL, HUBER_DELTA, LOWER, PARAM_LABELS, PARAMS, PHI, UPPER, at_bound

BOOTSTRAP_BOUND_SHARE = 0.05  # more refits than this with φ at a bound → φ not identified
SHAPE = ("E", "alpha", "beta")
_DELTA = "1e-3" if HUBER_DELTA == 1e-3 else f"{HUBER_DELTA:g}"


def bootstrap_bound_share(bootstrap: dict, free: np.ndarray) -> dict[str, float]:
    """Share of bootstrap refits with each free parameter at a bound ({label: share})."""
    samples = bootstrap["samples"]
    n = len(samples["e"])
    thetas = np.column_stack([np.asarray(samples.get(k, np.zeros(n)), dtype=float) for k in PARAMS])
    hits = at_bound(thetas, free[: len(PARAMS)])  # the law's six (an extension's ext is not listed)
    return {label: float(hits[:, i].mean()) for i, label in enumerate(PARAM_LABELS) if free[i]}


def _which_bound(theta: np.ndarray, i: int) -> str:
    return "lower" if theta[i] - LOWER[i] <= BOUND_TOL else "upper"


def _bound_value(label: str, theta: np.ndarray, i: int) -> str:
    edge = LOWER[i] if _which_bound(theta, i) == "lower" else UPPER[i]
    if label in ("A", "B", "E"):
        return f"{label} = e^{edge:g} = {math.exp(edge):.4g}"
    return f"{label} = {edge:g}"


def diagnose(
    main: LawFit,
    forms: dict[str, LawFit],
    bootstrap: dict | None,
    profile: dict | None,
) -> dict:
    """The ``diagnostics`` document of a protocol run (see the module docstring and docs/fitting.md)."""
    point = main.at_bound
    form_bounds = {name: f.at_bound for name, f in forms.items()}
    share = bootstrap_bound_share(bootstrap, main.free) if bootstrap else {}
    reasons: list[str] = []
    checks: dict = {}
    joint = forms.get("joint") if main.form != "chinchilla" else None
    phi_reasons: list[tuple[str, str]] = []  # (short reason, plain words for the verdict)
    if joint is not None:
        phi = float(joint.theta[PHI])
        checks["phi_at_bound"] = "phi" in joint.at_bound
        if checks["phi_at_bound"]:
            phi_reasons.append(
                (
                    f"phi at its {_which_bound(joint.theta, PHI)} bound ({phi:.3f})",
                    f"the best fit puts φ on the edge of the allowed range [{LOWER[PHI]:g}, {UPPER[PHI]:g}] "
                    f"(φ = {phi:.3f})",
                )
            )
        if profile is not None:
            lo, hi = profile["interval"]
            checks["profile_open"] = bool(any(profile["open"]))
            if checks["profile_open"]:
                lo_txt = f"{LOWER[PHI]:g} (the edge)" if lo is None else f"{lo:.2f}"
                hi_txt = f"{UPPER[PHI]:g} (the edge)" if hi is None else f"{hi:.2f}"
                side = " and ".join(s for s, o in zip(("below", "above"), profile["open"]) if o)
                phi_reasons.append(
                    (
                        f"profile interval open {side} (deviance stays under {profile['threshold']:.2f} "
                        "to the box edge)",
                        f"every φ from {lo_txt} to {hi_txt} fits about as well as the best one",
                    )
                )
        boot_phi = bootstrap is not None and main.form == "joint"
        if boot_phi:
            ci = bootstrap["ci"]["phi"]
            touches = bool(ci[0] - LOWER[PHI] <= BOUND_TOL or UPPER[PHI] - ci[1] <= BOUND_TOL)
            checks["bootstrap_ci_at_bound"] = touches
            if touches:
                phi_reasons.append(
                    (
                        f"bootstrap CI [{ci[0]:.3f}, {ci[1]:.3f}] touches a bound",
                        f"its {100 * bootstrap['level']:.0f}% bootstrap CI [{ci[0]:.2f}, {ci[1]:.2f}] runs "
                        "to the edge of the allowed range",
                    )
                )
            frac = share.get("phi", 0.0)
            checks["bootstrap_phi_at_bound_share"] = frac
            if frac > BOOTSTRAP_BOUND_SHARE:
                k, n = round(frac * bootstrap["resamples"]), bootstrap["resamples"]
                phi_reasons.append(
                    (
                        f"{k} of {n} bootstrap refits ({100 * frac:.0f}%) put phi at a bound",
                        f"{k} of {n} bootstrap refits put φ on the edge of the allowed range",
                    )
                )
        intervals = []
        if boot_phi:
            level = f"{100 * bootstrap['level']:.0f}%"
            intervals.append(("bootstrap CI", f"{level} bootstrap CI", bootstrap["ci"]["phi"]))
        if profile is not None and not checks.get("profile_open"):
            intervals.append(("profile interval", "profile interval", profile["interval"]))
        spans = [(short, long, ci) for short, long, ci in intervals if ci[0] <= 0.0 and ci[1] >= 1.0]
        checks["interval_spans_0_and_1"] = bool(spans)
        for short, long, (lo, hi) in spans[:1]:
            phi_reasons.append(
                (
                    f"{short} [{lo:.3f}, {hi:.3f}] contains both phi = 0 and phi = 1",
                    f"its {long} [{lo:.2f}, {hi:.2f}] contains both φ = 0 (a loop adds nothing) and φ = 1 "
                    "(a loop is worth a unique block)",
                )
            )
        reasons += [short for short, _ in phi_reasons]
    others = [name for name in point if name != "phi"]
    for name in others:
        i = PARAM_LABELS.index(name)
        reasons.append(
            f"{name} at its {_which_bound(main.theta, i)} bound ({_bound_value(name, main.theta, i)})"
        )
    shape = [name for name in others if name in SHAPE]
    checks["shape_at_bound"] = shape
    identified = None if joint is None else not (phi_reasons or shape)
    return {
        "at_bound": {"point": point, "forms": form_bounds, "bootstrap_share": share},
        "phi_identified": identified,
        "reasons": reasons,
        "checks": checks,
        "verdict": _held_clause(
            main, _verdict(main, joint, identified, phi_reasons, shape, bootstrap, profile)
        ),
        "objective_note": objective_note(forms if forms else {main.form: main}),
    }


def _held_clause(main: LawFit, verdict: str) -> str:
    """The verdict, saying which parameters were held (``--fix``/``--prior``): φ is conditional on them."""
    if not main.held:
        return verdict
    held = _names([PARAM_LABELS[PARAMS.index(name)] for name in main.held])
    return f"{verdict[:-1]} (given {held} held fixed, not fitted)."


def _names(names: list[str]) -> str:
    pretty = [{"alpha": "α", "beta": "β"}.get(n, n) for n in names]
    return pretty[0] if len(pretty) == 1 else ", ".join(pretty[:-1]) + " and " + pretty[-1]


def _verdict(main, joint, identified, phi_reasons, shape, bootstrap, profile) -> str:
    shape_clause = ""
    if shape:
        verb = "sits" if len(shape) == 1 else "sit"
        shape_clause = (
            f"; {_names(shape)} {verb} on the edge of the fit box, so the law's shape is not pinned down"
        )
    if joint is None:
        lead = f"Plain Chinchilla law (no φ) on {main.n_runs} runs"
        if shape_clause:
            return f"{lead}{shape_clause}."
        return f"{lead}: every parameter lies inside the fit box."
    if not identified and phi_reasons:
        return (
            f"φ is not identified by these runs: {phi_reasons[0][1]}, so they cannot say what a loop is worth"
            f"{shape_clause}."
        )
    if not identified:  # φ inside the box, but only given a shape parameter pinned to the box edge
        where = ", ".join(_bound_value(n, main.theta, PARAM_LABELS.index(n)) for n in shape)
        verb = "its bound" if len(shape) == 1 else "their bounds"
        return (
            f"φ is identified only given {_names(shape)} at {verb} ({where}): "
            f"φ = {float(joint.theta[PHI]):.3f} is conditional on where the fit box was drawn, not a "
            f"measurement; the runs do not determine {_names(shape)} (fix it from a prior, or add runs "
            "that do)."
        )
    parts = []
    if bootstrap is not None and main.form == "joint":
        lo, hi = bootstrap["ci"]["phi"]
        parts.append(f"{100 * bootstrap['level']:.0f}% bootstrap CI [{lo:.3f}, {hi:.3f}]")
    if profile is not None:
        lo, hi = profile["interval"]
        parts.append(f"profile interval [{lo:.3f}, {hi:.3f}]")
    detail = f" ({', '.join(parts)})" if parts else ""
    fixed = "" if main.form == "joint" else f" by the φ-free fit (the main fit fixes φ = {main.theta[PHI]:g})"
    caveat = ""
    if profile is not None and profile.get("agrees_with_bootstrap") is False:
        caveat = "; the bootstrap and profile intervals disagree, so read the width with care"
    return f"φ is identified{fixed}: {float(joint.theta[PHI]):.3f}{detail}{caveat}{shape_clause}."


def objective_note(forms: dict[str, LawFit]) -> str:
    """One line: why R² (squared error in nats) can rank forms differently from the minimised objective."""
    note = (
        "R² is 1 − Σ(L − L̂)²/Σ(L − L̄)² on raw losses (squared error in nats), but the fit minimises the "
        f"summed Huber (δ = {_DELTA}) of log-loss residuals, close to an absolute-error sum at these "
        "residuals, so the two can rank forms differently"
    )
    items = list(forms.items())
    flips = [
        (a, b)
        for i, (a, fa) in enumerate(items)
        for b, fb in items[i + 1 :]
        if (fa.objective - fb.objective) * (fa.r2 - fb.r2) > 0  # lower objective but lower R²
    ]
    if flips:
        a, b = flips[0]
        fa, fb = forms[a], forms[b]
        worse, better = (a, b) if fa.objective > fb.objective else (b, a)
        note += (
            f"; here {worse} has the higher R² ({forms[worse].r2:.4f} vs {forms[better].r2:.4f}) but the "
            f"worse objective ({forms[worse].objective:.4g} vs {forms[better].objective:.4g})"
        )
    return note + "."
