"""``loopscale demo``'s design and last line, on small synthetic inputs (the demo itself is not trained here):
the wording for runs above the bigram table, a rejected law, a law too weakly tested to reject and one that
holds with power, and the power it quotes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loopscale.demo import REFERENCE_FIT, Drift, demo_line, drift_power
from loopscale.sweep import plan_sweep, preset

# A law in fit.law's parameterisation (a, b, e, alpha, beta, phi) near the laptop sweep's fit.
THETA = np.array([2.5, 6.0, 0.6, 0.2, 0.43, 0.4])
DRIFT = Drift(THETA, sigma=0.012, per_decade=-0.4, source="laptop-factorial")


def _doc(verdict: str, phi_identified: bool = True, headline: str = "", tests: int = 3) -> dict:
    check = {"verdict": verdict, "headline": headline, "tests": tests, "family_level": 0.01}
    return {
        "fit": {"phi": 0.55},
        "diagnostics": {"phi_identified": phi_identified},
        "ci": {"phi": [0.4, 0.7]},
        "law_check": check,
    }


def _line(doc, finished=8, below=8, bigram=4.078, power=0.003, drift=DRIFT) -> str:
    return demo_line(doc, finished, below, bigram, power, drift, "100 restarts, 50 bootstrap resamples")


def test_runs_above_the_bigram_table_make_a_pipeline_check():
    line = _line(_doc("holds"), below=3)
    assert line.startswith(
        "most runs are above a bigram table (4.078 nats): a pipeline check, not a measurement; phi = 0.55"
    )
    assert "3 of 8 runs below the bigram table (4.078 nats)" in line and "too few" not in line
    # under 90% below is a pipeline check too, without "most"
    assert _line(_doc("holds"), finished=10, below=8).startswith("2 of 10 runs are above a bigram table")
    assert not _line(_doc("holds"), finished=10, below=9).startswith("1 of 10")


def test_a_rejected_law_leads_with_its_evidence():
    headline = "one constant phi is rejected: phi falls 0.40 per decade of compute (F = 16.1, p = 0.00017)"
    line = _line(_doc("rejected", headline=headline))
    assert line.startswith("8 runs reject one constant phi: phi falls 0.40 per decade of compute (F = 16.1")
    assert "phi = 0.55 (the constant-phi law, rejected)" in line


def test_a_law_check_without_power_says_too_few_to_reject():
    line = _line(_doc("holds", phi_identified=False))
    assert line.startswith(
        "8 runs: too few to reject one constant phi (none of 3 tests rejects it at family level 0.01; "
        "power 0.00 to detect the drift the laptop-factorial sweep measured, phi falling 0.40 per decade "
        "of compute); phi not identified (the point fit's 0.55 is no measurement); 8 of 8 runs below the "
        "bigram table (4.078 nats); "
        "fit: 100 restarts, 50 bootstrap resamples"
    )
    assert "family level 0.01; its power was not computed);" in _line(_doc("holds"), drift=None)
    assert "power n/a to detect" in _line(_doc("holds"), power=None)


def test_a_law_that_holds_with_power_says_so():
    line = _line(_doc("holds", tests=6), finished=68, below=68, power=0.93)
    assert line.startswith(
        "the law holds on these 68 runs (none of 6 tests rejects it at family level 0.01, power 0.93"
    )
    assert "phi = 0.550, 95% CI [0.40, 0.70]" in line


def test_an_unchecked_law_and_missing_baselines():
    untestable = _doc("untestable", headline="law not checked: 2 budget(s)")
    assert _line(untestable).startswith("8 runs: too few to check the law (law not checked: 2 budget(s))")
    line = _line(_doc("holds"), below=None, bigram=None)
    assert line.startswith("8 runs: too few to reject") and "; bigram table not available;" in line


def _runs(budgets, rs=(1, 2, 4, 8), widths=(32, 64)) -> list[dict]:
    """Runs of the 10-layer laptop template: N_once, N_rec per width and r, D = C / (6·N_unrolled)."""
    out = []
    for c in budgets:
        for d in widths:
            block = 12 * d * d
            for r in rs:
                n_once, n_rec = 2 * block, (8 // r) * block
                out.append({"n_once": n_once, "n_rec": n_rec, "r": r, "budget": c,
                            "tokens": c / (6 * (n_once + r * n_rec))})  # fmt: skip
    return out


def test_drift_power_grows_with_the_budget_span_and_is_the_level_without_a_drift():
    narrow = drift_power(_runs([1.6e12, 1.8e12, 2e12]), DRIFT, 0.01 / 3)
    wide = drift_power(_runs([1e12, 1e13, 1e14]), DRIFT, 0.01 / 3)
    assert 0 < narrow < 0.05 < 0.8 < wide <= 1
    null = Drift(THETA, 0.012, 0.0, "none")
    assert drift_power(_runs([1e12, 1e13, 1e14]), null, 0.01) == pytest.approx(0.01, rel=1e-6)
    assert drift_power(_runs([1e12, 1e13], rs=(1, 2))[:7], DRIFT, 0.01) is None  # 7 runs: 7 - 7 < 1 df


def test_reference_drift_is_read_from_a_fit_json(tmp_path):
    drift = Drift.from_fit_json(REFERENCE_FIT)
    assert drift is not None and drift.source == "laptop-factorial"
    assert drift.per_decade == pytest.approx(-0.398, abs=1e-3)
    assert drift.sigma == pytest.approx(0.0116, abs=1e-4)
    assert Drift.from_fit_json(tmp_path / "missing.json") is None
    (tmp_path / "fit.json").write_text(json.dumps({"fit": {}, "law_check": {"extensions": []}}))
    assert Drift.from_fit_json(tmp_path / "fit.json") is None


def test_demo_preset_is_the_fewest_runs_the_law_check_takes_below_the_laptop_budgets():
    """8 runs (the joint law needs 7, its law check one more), all at d = 32 and below the laptop grid's
    lowest budget (results/laptop: d = 32 at 2.5e12 scored 3.79–3.91 against a bigram table of 4.078)."""
    runs = plan_sweep(preset("demo"))
    laptop = min(r.budget for r in plan_sweep(preset("laptop")))
    assert len(runs) == 8 and {r.width for r in runs} == {32} and max(r.budget for r in runs) < laptop
    assert len({r.budget for r in runs}) == 3 and {r.r for r in runs} == {1, 2, 4, 8}
    assert preset("demo").train["data"]["val_tokens"] == preset("laptop").train["data"]["val_tokens"]
