"""Is φ identified? Parameters at the edge of the fit box, the verdict a report leads with (method §8.9).

A fit whose parameter sits on its box edge (within 1e-6, in the fitted parameterisation: e = log E, a, b,
α, β, φ) has not found an interior optimum: the data would have moved it further. φ is **not identified**
when any of these holds (each adds a ``PhiFlag`` to ``phi_flags``):

- the φ-free joint fit puts φ at a bound;
- the bootstrap's φ CI touches a bound;
- more than 5% of the bootstrap refits put φ at a bound;
- the profile-likelihood interval (``fit.profile``) is open at an end;
- the bootstrap CI or the profile interval contains both φ = 0 (a loop adds nothing beyond the unique
  blocks it reuses) and φ = 1 (each loop is worth a full unique block): the runs cannot tell the two
  reference answers apart, even if the interval stops short of the box edge.

- the point fit puts a shape parameter (E, α or β) on its bound: φ is then conditional on where the box
  was drawn (its edge stands in for a value the runs do not determine), and a parametric bootstrap
  simulated from that fit cannot show it. The verdict is then "identified only given E at its bound",
  never a finding; the reported interval is then not the random-effects bootstrap (``fit.protocol``).

A and B at a bound are listed in ``bounds`` too (they do not by themselves make φ unidentified). The result
holds codes and numbers (``fit.protocol_results.Diagnostics``); ``present.fit_text`` writes the verdict and
the reasons.
"""

from __future__ import annotations

import numpy as np

from loopscale.fit.fitter import LawFit
from loopscale.fit.identification_results import (
    BoundsFound,
    Diagnostics,
    FormRanking,
    IdentificationChecks,
    ParamAtBound,
    PhiFlag,
    ProfileResult,
)
from loopscale.fit.law import BOUND_TOL, LOWER, PARAM_LABELS, PARAMS, PHI, UPPER, at_bound
from loopscale.fit.protocol_results import CellBootstrap, RandomEffectsBootstrap

BOOTSTRAP_BOUND_SHARE = 0.05  # more refits than this with φ at a bound → φ not identified
SHAPE = ("E", "alpha", "beta")

Bootstrap = CellBootstrap | RandomEffectsBootstrap


def _bootstrap_bound_share(bootstrap: Bootstrap, free: np.ndarray) -> dict[str, float]:
    """Share of bootstrap refits with each free parameter at a bound ({label: share}): a leaf table."""
    samples = bootstrap.samples
    n = len(samples["e"])
    thetas = np.column_stack([np.asarray(samples.get(k, np.zeros(n)), dtype=float) for k in PARAMS])
    hits = at_bound(thetas, free[: len(PARAMS)])  # the law's six (an extension's ext is not listed)
    return {label: float(hits[:, i].mean()) for i, label in enumerate(PARAM_LABELS) if free[i]}


def _which_bound(theta: np.ndarray, i: int) -> str:
    return "lower" if theta[i] - LOWER[i] <= BOUND_TOL else "upper"


def diagnose(
    main: LawFit,
    forms: dict[str, LawFit],
    bootstrap: Bootstrap | None,
    profile: ProfileResult | None,
) -> Diagnostics:
    """The ``diagnostics`` of a protocol run (see the module docstring and docs/fitting.md)."""
    share = _bootstrap_bound_share(bootstrap, main.free) if bootstrap else {}
    return diagnosis(main, forms, bootstrap, profile, share)


def diagnosis(
    main: LawFit,
    forms: dict[str, LawFit],
    bootstrap: Bootstrap | None,
    profile: ProfileResult | None,
    share: dict[str, float],
) -> Diagnostics:
    """``diagnose`` given the bootstrap's ``share`` of refits at a bound per parameter (a fit.json keeps
    that share, not every draw: ``fit.protocol.read_protocol`` rebuilds an older document's diagnostics)."""
    checks: dict = {}
    joint = forms.get("joint") if main.form != "chinchilla" else None
    flags: list[PhiFlag] = []
    boot_phi = bootstrap is not None and main.form == "joint"
    if joint is not None:
        phi = float(joint.theta[PHI])
        checks["phi_at_bound"] = "phi" in joint.at_bound
        if checks["phi_at_bound"]:
            flags.append(PhiFlag("phi_at_bound", phi=phi, side=_which_bound(joint.theta, PHI)))
        if profile is not None:
            checks["profile_open"] = bool(any(profile.open))
            if checks["profile_open"]:
                flags.append(
                    PhiFlag(
                        "profile_open",
                        interval=profile.interval,
                        open=profile.open,
                        threshold=profile.threshold,
                    )
                )
        if boot_phi:
            lo, hi = bootstrap.ci["phi"]
            touches = bool(lo - LOWER[PHI] <= BOUND_TOL or UPPER[PHI] - hi <= BOUND_TOL)
            checks["bootstrap_ci_at_bound"] = touches
            if touches:
                flags.append(PhiFlag("bootstrap_ci_at_bound", interval=(lo, hi), level=bootstrap.level))
            frac = share.get("phi", 0.0)
            checks["bootstrap_phi_at_bound_share"] = frac
            if frac > BOOTSTRAP_BOUND_SHARE:
                n = bootstrap.resamples
                flags.append(PhiFlag("bootstrap_share", refits=round(frac * n), resamples=n, share=frac))
        intervals = []
        if boot_phi:
            intervals.append(PhiFlag("spans_0_and_1", interval=bootstrap.ci["phi"], level=bootstrap.level,
                                     source="bootstrap"))  # fmt: skip
        if profile is not None and not checks.get("profile_open"):
            intervals.append(PhiFlag("spans_0_and_1", interval=profile.interval, source="profile"))
        spans = [flag for flag in intervals if flag.interval[0] <= 0.0 and flag.interval[1] >= 1.0]
        checks["interval_spans_0_and_1"] = bool(spans)
        flags += spans[:1]
    others = [name for name in main.at_bound if name != "phi"]
    bounds = tuple(ParamAtBound(name, _which_bound(main.theta, PARAM_LABELS.index(name))) for name in others)
    shape = tuple(name for name in others if name in SHAPE)
    identified = None if joint is None else not (flags or shape)
    if joint is None:
        verdict = "plain"
    elif identified:
        verdict = "identified"
    else:
        verdict = "not_identified" if flags else "identified_given_shape"
    return Diagnostics(
        at_bound=BoundsFound(
            point=tuple(main.at_bound),
            forms={name: tuple(f.at_bound) for name, f in forms.items()},
            bootstrap_share=share,
        ),
        phi_identified=identified,
        checks=IdentificationChecks(**checks, shape_at_bound=shape),
        verdict=verdict,
        phi_flags=tuple(flags),
        bounds=bounds,
        n_runs=main.n_runs,
        phi=None if joint is None else float(joint.theta[PHI]),
        fixed_phi=None if main.form in ("joint", "chinchilla") else float(main.theta[PHI]),
        bootstrap_ci=tuple(bootstrap.ci["phi"]) if boot_phi else None,
        bootstrap_level=bootstrap.level if boot_phi else None,
        profile_interval=None if profile is None else profile.interval,
        intervals_disagree=profile is not None and profile.agrees_with_bootstrap is False,
        held=tuple(PARAM_LABELS[PARAMS.index(name)] for name in main.held),
        ranking=form_ranking(forms if forms else {main.form: main}),
    )


def form_ranking(forms: dict[str, LawFit]) -> FormRanking | None:
    """The first pair of forms whose R² (squared error in nats) and minimised objective (summed Huber of
    log-loss residuals) rank them in opposite orders; None when they agree on every pair."""
    items = list(forms.items())
    flips = [
        (a, b)
        for i, (a, fa) in enumerate(items)
        for b, fb in items[i + 1 :]
        if (fa.objective - fb.objective) * (fa.r2 - fb.r2) > 0  # lower objective but lower R²
    ]
    if not flips:
        return None
    a, b = flips[0]
    worse, better = (a, b) if forms[a].objective > forms[b].objective else (b, a)
    fw, fb = forms[worse], forms[better]
    return FormRanking(worse, better, fw.r2, fb.r2, fw.objective, fb.objective)
