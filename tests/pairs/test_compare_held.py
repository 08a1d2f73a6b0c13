"""``loopscale compare --fix`` / ``--prior``: E, A, B, α, β held in both arms (``fit.priors``), as ``fit``
holds them; φ cannot be held. Cheap settings throughout (few starts, ≤ 16 resamples)."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest

from loopscale.cli import main
from loopscale.fit import load_table
from loopscale.fit.law import PARAMS
from loopscale.fit.priors import NO_LAW_CHECK, build_held
from loopscale.pairs.case_study import compare_arms
from loopscale.pairs.case_study_results import read_case_study
from loopscale.pairs.compare import bootstrap_shared, make_arms, shared_model
from loopscale.paper import JOINT_FIT
from loopscale.present.compare_text import case_study_verdict, format_compare

from .test_compare import _arms_rows

HELD = ("alpha", "beta", "E")
TRUTH = {k: JOINT_FIT[k] for k in HELD}


def _compare(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["compare", *args])
    return code, out.getvalue(), err.getvalue()


def test_held_at_the_truth_recovers_delta_phi_and_reports_what_was_held():
    base, variant = _arms_rows(-0.1, 0.003, seed=13)
    held = build_held(TRUTH, None)
    doc = compare_arms(
        load_table(base), load_table(variant), restarts=10, resamples=16, bootstrap_restarts=1, held=held
    )
    d = doc.delta_phi
    assert d.ci[0] <= -0.1 <= d.ci[1] and d.estimate == pytest.approx(-0.1, abs=0.02)
    theta = dict(zip(PARAMS, d.theta))  # the held columns never move
    assert theta["alpha"] == TRUTH["alpha"] and theta["beta"] == TRUTH["beta"]
    assert theta["e"] == math.log(TRUTH["E"]) and not {"E", "alpha", "beta"} & set(d.at_bound)
    for fit in doc.delta_phi_separate.fits.values():
        assert fit["held"] == ["E", "alpha", "beta"] and fit["alpha"] == TRUTH["alpha"]
    assert doc.settings.fixed == {k: {"value": v, "source": "--fix"} for k, v in TRUTH.items()}
    assert doc.settings.prior is None
    assert doc.law_check is None and doc.notes == ("no_law_check",)
    assert case_study_verdict(doc).endswith("(given alpha, beta, E held fixed, not fitted)")
    text = format_compare(doc)
    assert "held fixed (not fitted, no CI of their own): alpha = 0.19924 (--fix)" in text
    assert f"note: {NO_LAW_CHECK}" in text


def test_the_shared_bootstrap_holds_a_priors_draw_per_refit(tmp_path):
    base, variant = _arms_rows(0.1, 0.003, seed=3)
    rng = np.random.default_rng(0)
    samples = {k: (v * (1 + 0.01 * rng.standard_normal(4))).tolist() for k, v in TRUTH.items()}
    prior = tmp_path / "prior.json"
    prior.write_text(json.dumps({"fit": TRUTH, "bootstrap": {"samples": samples}}))
    held = build_held({}, str(prior))
    arms = make_arms(load_table(base), load_table(variant))
    model = shared_model(arms, "paper", held=held)
    theta = np.where(model.box.free, [3.3, 6.8, 0.0, 0.2, 0.37, 0.46, 0.1], model.box.fixed_values)
    thetas = bootstrap_shared(model, arms, theta, 6, restarts=1, held_draws=held.theta_draws(6)).thetas
    rows = np.arange(6) % 4  # the prior's rows, cycled
    assert thetas[:, PARAMS.index("alpha")].tolist() == np.array(samples["alpha"])[rows].tolist()
    assert np.allclose(thetas[:, PARAMS.index("e")], np.log(samples["E"])[rows], rtol=0, atol=1e-15)


def test_compare_cli_prior_paper_stores_its_source(tmp_path):
    base, variant = _arms_rows(0.15, 0.003, seed=17)
    low = sorted({r["budget"] for r in variant})[:2]  # a small table: two budgets, 36 + 27 runs
    for name, rows in (("base", base), ("variant", [r for r in variant if r["budget"] in low])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "compare.json"
    args = [str(tmp_path / "base.jsonl"), str(tmp_path / "variant.jsonl"), "--restarts", "5"]
    cheap = ["--bootstrap", "4", "--bootstrap-restarts", "0", "--prior", "paper", "--json", str(out)]
    code, text, err = _compare([*args, *cheap])
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert {k: v["source"] for k, v in doc["settings"]["fixed"].items()} == dict.fromkeys(HELD, "paper")
    assert doc["settings"]["prior"]["source"] == "paper" and doc["settings"]["prior"]["resampled"] is False
    assert doc["runs"]["budgets"] == low and doc["law_check"] is None
    verdict = case_study_verdict(read_case_study(doc))
    assert "prior paper: the published law" in text and text.splitlines()[0] == verdict


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (["--fix", "foo=1"], "unknown parameter 'foo'"),
        (["--fix", "phi=0.5"], "--fix phi: compare measures phi in each arm"),
        (["--prior", "missing.json"], "--prior: no such file: missing.json"),
        (["--prior", "paper", "--fix", "beta=0.3"], "both set beta"),
    ],
)
def test_compare_refuses_bad_holds_in_one_line(tmp_path, bad, words):
    code, _, err = _compare([str(tmp_path / "base.csv"), str(tmp_path / "variant.csv"), *bad])
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err
