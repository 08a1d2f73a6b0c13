"""The captions of the report's figures, by file name (the figures are drawn by ``loopscale.present``)."""

from __future__ import annotations


def caption(path) -> str:
    """The caption of a report figure, by its file name (the stem itself for an unknown one)."""
    return {
        "collapse": "Data collapse: L − B·D^−β against N_eff = N_once + r^φ·N_rec (log x) with the fitted φ, "
        "φ = 0 and φ = 1, each with its own form's coefficients; the line is E + A·N_eff^−α. When φ is "
        "right every r falls on one curve (panel titles give each form's RMSE).",
        "loop_tax": "The loop tax: per budget, loss against N for each r (points) with the fitted joint law "
        "(lines), the parabola in log N and its vertex (star) where the widths bracket it.",
        "loss_change_by_r": "Is it φ? The loss change of every seed-matched pair (variant − base at one "
        "budget, width, r and seed; colour: budget) against r, its mean per r (±2 SE), and what each effect "
        "model predicts (base-law token part + the model's excess; the chosen one bold): a change of φ must "
        "grow with r, an offset is flat, a token gain follows the token part.",
        "loss_by_test_time_r": "Loops at test time: per trained r, the mean over the pairs of the val loss at"
        " each test-time loop count minus the val loss at the trained r (dotted line), for the base (grey) "
        "and the recipe (red), with 95% t error bars over the pairs; y is linear within ±0.01 nats and "
        "logarithmic beyond.",
        "excess_by_width": "Is it one constant? The excess of every seed-matched pair beyond the base law's "
        "token part against width (log x; colour: r, r = 1 pairs hollow), the mean per (r, width) "
        "cluster, and the slope of the excess left beyond the chosen model along log width with its "
        "interval: a constant effect leaves a flat band, one that grows with size a slope.",
        "isoflop": "Iso-FLOP curves per r: observed final validation loss (points), the fitted joint law "
        "(lines), the parabola in log N (dotted) and its vertex (star) where bracketed; cells marked "
        '"not bracketed" have no vertex.',
        "phi_profile": "Profile likelihood of φ: deviance against φ with the χ²₁ threshold, the profile "
        "interval (shaded), the bootstrap CI (dashed) and φ̂.",
        "phi_bootstrap": "Block-bootstrap distribution of φ with the point estimate and the 95% CI.",
        "residuals": "Residuals of the joint fit (observed − predicted, nats) against N and D.",
        "residuals_vs_width": "Residuals of the fit (observed − predicted, nats) against width, one panel "
        "per r, coloured by budget, with the mean per width: a law that describes the runs leaves a flat "
        "band around 0 in every panel.",
        "frontier": "Compute-optimal loss L* and size N* per r from the fitted law.",
        "phi_per_budget": "φ refitted per budget (E, α, β shared within a refit; points with their CIs) and "
        "per half of the budgets (segments), against the constant-φ fit (line, its interval shaded) and the "
        "paper's φ (dashed): a law with one constant φ puts every point on the line.",
        "delta_phi_per_budget": "Δφ per budget (both arms refitted at each budget with E, α, β of the pooled "
        "shared fit held; run-bootstrap 95% CIs); band: the pooled shared estimate and its interval; dashed: "
        "the paper's effect for this case study.",
        "isoflop_arms": "Iso-FLOP curves of both arms, one panel per budget: loss against N, colour by r; "
        "filled markers and solid lines the base, open markers and dashed lines the variant (r = 1: the "
        "shared anchors).",
        "axes": "Downstream axis continuation loss against validation loss, per r (loopscale eval-sweep).",
    }.get(path.stem, path.stem)
