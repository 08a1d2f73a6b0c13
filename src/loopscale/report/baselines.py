"""Count-model baselines of a sweep's validation tokens (unigram / bigram cross-entropy, nats) and how many
runs beat the bigram table: a φ measured on runs worse than it is about token statistics, not language."""

from __future__ import annotations

from loopscale.fit.protocol_results import Baselines
from loopscale.report.formatting import finished_runs


def below_bigram_counts(baselines: Baselines, rows: list[dict]) -> tuple[int, int, float] | None:
    """(finished runs below the bigram table, finished runs, the bigram table's loss in nats), or None
    when the baselines are not available."""
    values = baselines.values
    if values is None:
        return None
    losses = [row["loss"] for row in finished_runs(rows)]
    return sum(loss < values.bigram for loss in losses), len(losses), values.bigram


def baseline_statement(baselines: Baselines, below_bigram: tuple[int, int, float] | None) -> str:
    values = baselines.values
    if values is None:
        return f"Count-model baselines (unigram / bigram loss of the validation tokens) {baselines.note}"
    below, finished, _ = below_bigram
    return (
        f"Baselines on the same {values.val_tokens:,} validation tokens: a unigram table scores "
        f"{values.unigram:.3f} nats and a bigram table (Witten–Bell) {values.bigram:.3f} nats; "
        f"{below} of {finished} finished runs are below the bigram table"
        + (
            "."
            if below == finished
            else ": a run above it has learned less than token-pair statistics, so read φ with that in mind."
        )
    )
