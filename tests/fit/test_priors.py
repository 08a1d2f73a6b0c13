"""``loopscale fit --fix`` / ``--prior``: held parameters and priors for small (ladder) tables.

Cheap settings throughout (3–10 starts, 20 bootstrap resamples, the profile and the law check off where they
are not the point): the ladder's fits are well posed once α, β, E are held.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math

import numpy as np
import pytest

from loopscale.cli import main
from loopscale.fit import load_table
from loopscale.fit.bootstrap import random_effects_bootstrap
from loopscale.fit.diagnostics import diagnose
from loopscale.fit.fitter import fit_law
from loopscale.fit.law import law_loss
from loopscale.fit.priors import FixedSettings, build_held, fixed_settings
from loopscale.fit.profile import profile_phi

TRUTH = {"A": 28.027, "alpha": 0.19924, "B": 915.82, "beta": 0.36863, "E": 1.56773, "phi": 0.459}
FIX_TRUTH = f"alpha={TRUTH['alpha']},beta={TRUTH['beta']},E={TRUTH['E']}"
QUICK = ["--restarts", "3", "--no-profile", "--no-law-check"]


def ladder(seed: int, noise: float = 0.005) -> list[dict]:
    """qlabs-style: a plain (r = 1) and a looped (r = 4) arm, 11 sizes each, D = 20·N, the law + noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for r, once in ((1, 1.0), (4, 0.15)):
        for i, n in enumerate(np.geomspace(2e7, 1.2e9, 11)):
            n_once, n_rec, d = once * n, (1 - once) * n, 20 * n
            loss = float(law_loss(TRUTH, n_once, n_rec, r, d)) + noise * rng.standard_normal()
            budget = 6 * (n_once + r * n_rec) * d
            rows.append(
                {"run": f"r{r}-{i}", "r": r, "n_once": n_once, "n_rec": n_rec, "tokens": d, "budget": budget}
                | {"loss": loss, "status": "ok"}
            )
    return rows


def _csv(path, rows) -> str:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def _fit(args) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["fit", *args])
    assert code == 0, err.getvalue()
    return {"stdout": out.getvalue()}


def _fail(args) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["fit", *args])
    assert code == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def table_csv(tmp_path_factory):
    return _csv(tmp_path_factory.mktemp("ladder") / "ladder.csv", ladder(0))


@pytest.fixture(scope="module")
def propagated(tmp_path_factory, table_csv):
    """The ladder fitted with α, β, E held exactly (--fix) and resampled from a FIT.json prior."""
    tmp = tmp_path_factory.mktemp("prior")
    rng = np.random.default_rng(1)
    cov = np.array([[1.0, 0.6, 0.5], [0.6, 1.0, 0.4], [0.5, 0.4, 1.0]]) * np.outer(
        [0.01, 0.01, 0.02], [0.01, 0.01, 0.02]
    )
    draws = rng.multivariate_normal([TRUTH["alpha"], TRUTH["beta"], TRUTH["E"]], cov, 20)
    prior = tmp / "prior.json"
    samples = {"alpha": draws[:, 0].tolist(), "beta": draws[:, 1].tolist(), "E": draws[:, 2].tolist()}
    fit = {k: TRUTH[k] for k in ("alpha", "beta", "E")}
    prior.write_text(json.dumps({"fit": fit, "bootstrap": {"samples": samples}}))
    cheap = [
        "--restarts",
        "5",
        "--bootstrap",
        "20",
        "--bootstrap-restarts",
        "2",
        "--no-profile",
        "--no-law-check",
    ]
    docs = {}
    for name, extra in (("fixed", ["--fix", FIX_TRUTH]), ("prior", ["--prior", str(prior)])):
        out = _fit([table_csv, *cheap, *extra, "--json", str(tmp / f"{name}.json")])
        docs[name] = json.loads((tmp / f"{name}.json").read_text()) | out
    return docs, str(prior)


def test_fix_holds_values_exactly(propagated):
    doc = propagated[0]["fixed"]
    for key in ("fit", *(f"forms.{k}" for k in ("joint", "phi=0", "phi=1"))):
        fit = doc["fit"] if key == "fit" else doc["forms"][key.split(".", 1)[1]]
        assert fit["alpha"] == TRUTH["alpha"] and fit["beta"] == TRUTH["beta"]
        assert math.isclose(fit["E"], TRUTH["E"], rel_tol=1e-15)
        assert fit["held"] == ["E", "alpha", "beta"] and not set(fit["at_bound"]) & {"E", "alpha", "beta"}
    # a held parameter gets no CI of its own; the free ones do
    assert set(doc["ci"]) == {"A", "B", "phi"} and set(doc["bootstrap"]["ci"]) == {"A", "B", "phi", "a", "b"}


def test_fix_phi_is_fix_phi(tmp_path, table_csv):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    out_a = _fit([table_csv, *QUICK, "--bootstrap", "0", "--fix", "phi=0.3", "--json", str(a)])
    out_b = _fit([table_csv, *QUICK, "--bootstrap", "0", "--fix-phi", "0.3", "--json", str(b)])
    doc_a, doc_b = json.loads(a.read_text()), json.loads(b.read_text())
    assert doc_a == doc_b and out_a["stdout"].replace(str(a), "") == out_b["stdout"].replace(str(b), "")
    assert doc_a["fit"]["phi"] == 0.3 and doc_a["settings"]["fix_phi"] == 0.3
    assert doc_a["settings"]["fixed"] == {"phi": {"value": 0.3, "source": "--fix"}}


@pytest.mark.parametrize(
    ("fix", "words"),
    [
        ("gamma=1", "unknown parameter 'gamma'"),
        ("alpha=abc", "alpha is not a number"),
        ("alpha", "NAME=VALUE"),
        ("alpha=3", "outside the fit box [0, 2.5]"),
        ("E=100", "outside the fit box [e^-3, e^2]"),
        ("E=-1", "must be positive"),
        ("phi=4", "outside the fit box [-3, 3]"),
        ("alpha=0.2,alpha=0.3", "given twice"),
    ],
)
def test_bad_fix_is_one_line_exit_2(table_csv, fix, words):
    assert words in _fail([table_csv, "--fix", fix])


def test_bad_prior_is_one_line_exit_2(tmp_path, table_csv):
    assert "no such file" in _fail([table_csv, "--prior", str(tmp_path / "none.json")])
    (tmp_path / "bad.json").write_text("{}")
    assert "not a `fit --json` document" in _fail([table_csv, "--prior", str(tmp_path / "bad.json")])
    assert "both set alpha" in _fail([table_csv, "--prior", "paper", "--fix", "alpha=0.2"])


def test_ladder_needs_the_prior_and_recovers_phi_with_it():
    """Held α, β, E at the truth: φ inside its (random-effects bootstrap) CI in ≥ 4 of 5 seeds; φ free:
    not identified (the profile interval is open), in every seed."""
    held = build_held({k: TRUTH[k] for k in ("alpha", "beta", "E")}, None).theta
    covered = []
    for seed in range(5):
        table = load_table(ladder(seed))
        fit = fit_law(table, restarts=10, seed=seed, held=held)
        ci = random_effects_bootstrap(fit, table, resamples=20, restarts=2, seed=seed).ci
        assert "alpha" not in ci and "E" not in ci
        covered.append(ci["phi"][0] <= TRUTH["phi"] <= ci["phi"][1])
        if seed < 2:
            free = fit_law(table, restarts=10, seed=seed)
            prof = profile_phi(table, [free], points=21, restarts=2, seed=seed)
            assert diagnose(free, {"joint": free}, None, prof).phi_identified is False
    assert sum(covered) >= 4, covered


def test_prior_propagates_into_phi_interval(propagated):
    docs, prior = propagated
    fixed, resampled = docs["fixed"], docs["prior"]
    width = {k: d["ci"]["phi"][1] - d["ci"]["phi"][0] for k, d in docs.items() if k in ("fixed", "prior")}
    assert fixed["ci_method"] == resampled["ci_method"] == "random_effects_bootstrap"
    assert width["prior"] >= width["fixed"], width
    cell = {k: d["bootstrap"]["ci"]["phi"] for k, d in docs.items()}
    assert cell["prior"][1] - cell["prior"][0] >= cell["fixed"][1] - cell["fixed"][0]
    assert resampled["bootstrap"]["held_resampled"] == ["alpha", "beta", "e"]
    # the resampled values are the prior's rows, in order (their correlation kept)
    assert (
        resampled["bootstrap"]["samples"]["alpha"]
        == json.loads(open(prior).read())["bootstrap"]["samples"]["alpha"]
    )


def test_fit_json_records_fixed_values_and_source(propagated):
    docs, prior = propagated
    assert docs["fixed"]["settings"]["fixed"] == {
        k: {"value": TRUTH[k], "source": "--fix"} for k in ("alpha", "beta", "E")
    }
    assert docs["fixed"]["settings"]["prior"] is None
    rec = docs["prior"]["settings"]
    assert {k: v["source"] for k, v in rec["fixed"].items()} == {"alpha": prior, "beta": prior, "E": prior}
    assert rec["prior"]["source"] == prior and rec["prior"]["resampled"] and rec["prior"]["samples"] == 20
    text = docs["prior"]["stdout"]
    assert f"alpha = 0.19924 ({prior})" in text and f"prior {prior}: alpha, beta, E resampled" in text
    assert "(given E, α and β held fixed, not fitted)" in text.splitlines()[0]
    assert "no law check" not in text  # --no-law-check: no note needed


def test_fixed_settings_keep_the_order_given_and_read_back():
    held = build_held({"B": 900.0, "A": 28.0}, "paper", phi_fixed=True)
    fixed = fixed_settings(held, 0.45)
    doc = fixed.to_dict()
    assert list(doc) == ["B", "A", "alpha", "beta", "E", "phi"]  # --fix's order, the prior's, φ last
    assert doc["alpha"] == {"value": 0.19924, "source": "paper"} and doc["phi"]["source"] == "--fix"
    assert FixedSettings.from_dict(json.loads(json.dumps(doc))) == fixed
    assert fixed_settings(None, None).to_dict() == {}


def test_prior_paper_is_held_exactly_and_says_so(tmp_path, table_csv):
    out = tmp_path / "paper.json"
    text = _fit([table_csv, *QUICK, "--bootstrap", "0", "--prior", "paper", "--json", str(out)])["stdout"]
    doc = json.loads(out.read_text())
    assert doc["fit"]["alpha"] == 0.19924 and doc["settings"]["fixed"]["E"]["source"] == "paper"
    assert doc["settings"]["prior"]["resampled"] is False
    assert "carries no interval for alpha, beta, E" in text
