"""The dataset baselines a report sets the runs beside: unigram and bigram cross-entropy of the sweep's
validation tokens (nats), computed once at analysis time."""

from __future__ import annotations

from pathlib import Path

from loopscale.errors import UserError
from loopscale.fit.protocol_results import Baselines, BaselineValues
from loopscale.published import path_from, relative_text


def dataset_baseline_losses(spec, folder: Path) -> Baselines:
    """Unigram/bigram cross-entropy of the sweep's validation tokens, or why they are not available; the
    dataset path relative to the report ``folder`` (a published report names no machine path)."""
    from loopscale.data.baselines import train_baselines
    from loopscale.train.config import DEFAULT_DATASET

    path = ((spec.train or {}).get("data") or {}).get("path") or DEFAULT_DATASET
    try:
        values = train_baselines(spec.train)
    except UserError as exc:
        return Baselines(values=None, note=f"not available: {relative_text(str(exc), folder)}")
    return Baselines(
        values=BaselineValues.from_dict(values.to_dict()), note=None, dataset=path_from(folder, path)
    )
