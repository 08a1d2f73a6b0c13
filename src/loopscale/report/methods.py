"""The methods section: how this report was made, in a reader's words, citing docs/method.md by section
("method §X"). Losses in nats, compute in training FLOPs, D in tokens."""

from __future__ import annotations

from loopscale.fit.protocol_results import ProtocolResult
from loopscale.report.document import Section


def methods_section(doc: ProtocolResult) -> Section:
    """What was fitted and how (the settings fit.json records), starting collapsed."""
    settings = doc.settings
    boot = doc.bootstrap
    return Section(
        "Methods",
        [
            "The law: L = E + A·(N_once + r^φ·N_rec)^−α + B·D^−β, with N_once the parameters run once, "
            "N_rec those of the looped block, r the number of loops and D the training tokens (method §8.1).",
            f"The fit minimises the summed Huber loss (δ = {settings.huber_delta:g}) of log loss with "
            f"L-BFGS-B from {settings.restarts} starting points inside a fixed box (method §8.2, §8.3); "
            "R² is computed on the raw losses.",
            (
                f"φ's block-bootstrap CI resamples whole (budget, r) cells, {boot.resamples} times "
                "(method §8.4); "
                if boot
                else "No bootstrap was run (method §8.4); "
            )
            + "the profile-likelihood interval refits the law with φ fixed on a grid and keeps the φ whose "
            "deviance stays under the χ²₁ threshold; φ counts as identified only when the diagnostics of "
            "method §8.9 allow it.",
            "Before φ is read, the law check tests whether one constant φ describes the runs: each budget "
            "left out and predicted, the lack of fit against the replicate seeds' noise, one-parameter "
            "extensions of the law and φ refitted per budget (method §8.10).",
            "The compute-optimal allocation comes from the fitted law over continuous width with exact "
            "training FLOPs as trained (truncated BPTT charges its detached loops forward only; method §8.7, "
            "§4.2, §2.6); the empirical minima from a parabola in log N per iso-FLOP cell (method §8.7).",
        ],
        collapsed=True,
    )
