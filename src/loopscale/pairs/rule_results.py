"""The effect rule's small results (``pairs.rule``), as records: the pairs' noise components and the
truths a calibration table is simulated under. NumPy-free: numbers and codes only (issue 42)."""

from __future__ import annotations

from dataclasses import dataclass

from loopscale.fit.results import Record


@dataclass(frozen=True)
class NoiseComponents(Record):
    """Variances of the pairs' errors (nats²): ``iid`` within (r, width) clusters, ``cluster`` between them
    (a method-of-moments estimate, or a known value), ``cluster_upper`` the upper bound the simulations draw
    with, and ``i2`` the share of the cluster means' spread beyond the iid noise's (None where the errors
    are known, not estimated)."""

    iid: float
    cluster: float
    cluster_upper: float
    i2: float | None = None


@dataclass(frozen=True)
class Truth(Record):
    """One row of the calibration table: its label (``"tokens only"``, a model name, ``"delta phi = +0.19"``)
    and the true effect {term: value} the tables are simulated with (Δφ in units of φ, constants in nats)."""

    label: str
    truth: dict[str, float]
