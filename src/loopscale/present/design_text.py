"""Sentences of ``loopscale design``'s document (``design.results``)."""

from __future__ import annotations

from loopscale.design.results import AGREEMENT, DesignRow


def agreement_text(row: DesignRow) -> str:
    """The sentence of a simulated design whose realised φ CI width lies outside ±``AGREEMENT`` of the
    asymptotic prediction (``row.agreement`` set): trust the simulation, not the prediction."""
    ratio = row.realised.ci_width["phi"] / row.predicted_ci["phi"]
    return (
        f"the realised phi CI is {ratio:.2f}x the asymptotic prediction ({row.agreement} than "
        f"±{AGREEMENT:.0%}): the Fisher information is not a reliable guide for this design (few cells, "
        "bound hits or a non-Gaussian fit); trust the simulation"
    )
