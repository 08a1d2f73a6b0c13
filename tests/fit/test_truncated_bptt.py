"""Truncated BPTT in the fitted law's allocation and cost: a truncated arm's frontier, equivalence and report
use its FLOPs per token as trained (accounting.flops_per_token with bptt_k), not full BPTT's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loopscale.accounting import count_params, flops_per_token
from loopscale.cli import main
from loopscale.config import replace, to_dict
from loopscale.errors import UserError
from loopscale.fit import compute_optimal, equivalence, load_table, run_protocol
from loopscale.fit.analyses import SizeModel, bptt_by_r
from loopscale.fit.template import load_template
from loopscale.present.fit_text import protocol_text
from loopscale.report.allocation import frontier_section
from loopscale.report.result import result_section

RESULTS = Path(__file__).resolve().parents[2] / "results"
TRUNCATED = RESULTS / "laptop-truncated-bptt"
CEIL_HALF = {2: 1, 4: 2, 8: 4}


@pytest.fixture(scope="module")
def laptop():
    return load_template(TRUNCATED / "sweep.yaml")[0]


def test_size_model_charges_truncated_flops_and_keeps_the_counts(laptop):
    for r, k in CEIL_HALF.items():
        full, truncated = SizeModel.build(laptop, r), SizeModel.build(laptop, r, bptt_k=k)
        assert truncated.bptt_k == k and SizeModel.build(laptop, r, bptt_k=r).bptt_k is None
        for width in (32, 48, 80, 160):
            cfg = replace(laptop, width=width, r=r, bptt_k=k)
            assert truncated("flops", width) == pytest.approx(flops_per_token(cfg), abs=1e-3)
            assert truncated("flops", width) < full("flops", width)
            for name in ("n", "n_once", "n_rec"):
                assert truncated(name, width) == full(name, width)


def test_bptt_by_r_reads_the_truncated_table_and_full_tables_give_nothing():
    assert bptt_by_r(load_table(TRUNCATED / "results.csv")).k == CEIL_HALF
    assert bptt_by_r(load_table(RESULTS / "laptop-factorial" / "results.csv")).k == {}  # k = r recorded
    rows = [{"r": r, "n_once": 10, "n_rec": 20, "tokens": 100 + r, "loss": 3.0} for r in (1, 2, 4)]
    assert bptt_by_r(load_table(rows)).k == {}  # no bptt_k column: full BPTT


@pytest.mark.parametrize(
    "ks,words",
    [((2, 4), "disagree"), ((2, None), "disagree"), ((1, 2), "disagree"), ((5, 5), "1..4"), ((1.5,), "1..4")],
)
def test_bptt_by_r_refuses_runs_that_disagree_at_one_r(ks, words):
    rows = [
        {"run": f"r4-{i}", "r": 4, "n_once": 10, "n_rec": 20, "tokens": 100 + i, "loss": 3.0, "bptt_k": k}
        for i, k in enumerate(ks)
    ]
    with pytest.raises(UserError, match=words) as err:
        bptt_by_r(load_table(rows))
    assert "\n" not in str(err.value)


def test_truncated_frontier_spends_each_budget_at_the_accounted_flops(laptop):
    coef = {"E": 1.2, "A": 8.0, "B": 3600.0, "alpha": 0.13, "beta": 0.6, "phi": 0.42}
    budgets = (3.2e12, 1.25e13)
    out = compute_optimal(coef, budgets, (1, 2, 4, 8), laptop, bptt_k=CEIL_HALF)
    full = compute_optimal(coef, budgets, (1, 2, 4, 8), laptop)
    assert out.bptt_k == {"2": 1, "4": 2, "8": 4} and full.bptt_k == {}
    for r, k in CEIL_HALF.items():
        # F(d) as an independent quadratic through the accounting at six legal widths, read at the optimum
        widths = np.array([16.0 * i for i in range(1, 7)])
        f = [flops_per_token(replace(laptop, width=int(w), r=r, bptt_k=k)) for w in widths]
        poly = np.polyfit(widths, f, 2)
        for row in out.per_r[str(r)].rows:
            assert row.budget / row.tokens == pytest.approx(np.polyval(poly, row.width), rel=1e-9)
        assert out.per_r[str(r)].rows != full.per_r[str(r)].rows
    assert out.per_r["1"] == full.per_r["1"]


def test_equivalence_costs_less_than_the_plain_model_under_truncation(laptop):
    params = count_params(replace(laptop, width=48, r=1)).n
    full = equivalence(params, 4, 0.42, laptop)
    truncated = equivalence(params, 4, 0.42, laptop, bptt_k=2)
    assert truncated.width == pytest.approx(48)
    ratio = flops_per_token(replace(laptop, width=48, r=4, bptt_k=2)) / flops_per_token(
        replace(laptop, width=48, r=1)
    )
    assert truncated.flops_ratio == pytest.approx(ratio, rel=1e-9)
    assert truncated.flops_ratio == pytest.approx(0.790, abs=5e-4) and full.flops_ratio > 1
    assert truncated.cost_equivalent_params < params < full.cost_equivalent_params
    assert (truncated.bptt_k, full.bptt_k) == (2, None)
    for key in ("unique_params", "effective_params", "worth"):
        assert getattr(truncated, key) == getattr(full, key)
    assert equivalence(params, 4, 0.42, laptop, bptt_k=4) == full  # k = r is full BPTT
    with pytest.raises(UserError, match="bptt_k"):
        equivalence(params, 4, 0.42, laptop, bptt_k=5)


def test_fit_and_report_of_the_truncated_table_use_truncated_flops(laptop):
    table = load_table(TRUNCATED / "results.csv")
    settings = dict(restarts=20, bootstrap=0, profile=False, law_check=False)
    protocol = run_protocol(table, flops_model=laptop, **settings)
    doc = protocol.to_dict()
    assert doc["compute_optimal"]["bptt_k"] == {"2": 1, "4": 2, "8": 4}
    said = "truncated BPTT: k = ⌈r/2⌉ loops backpropagated (r=2: k=1, r=4: k=2, r=8: k=4)"
    assert said in protocol_text(protocol.result())
    assert said in frontier_section(protocol.result()).blocks[0]
    text = " ".join(b for b in result_section(protocol.result(), table, laptop).blocks if isinstance(b, str))
    sentence = text[text.index("Equivalence at this scale") :]
    costs = float(sentence.split("while it costs ")[1].split("×")[0])
    assert costs == pytest.approx(0.790, abs=1e-3)
    assert "the last 2 of 4 loops backpropagated" in sentence


def test_equiv_cli_takes_bptt_k_from_the_flag_or_the_fit(laptop, tmp_path, capsys):
    params = str(count_params(replace(laptop, width=48, r=1)).n)
    cfg = str(TRUNCATED / "sweep.yaml")
    base = ["equiv", "--phi", "0.42", "--r", "4", "--params", params, "--model-config", cfg, "--json"]
    assert main([*base, "--bptt-k", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bptt_k"] == 2 and out["flops_ratio"] == pytest.approx(0.790, abs=5e-4)
    fit = tmp_path / "fit.json"
    model = to_dict(laptop)
    fit.write_text(json.dumps({"fit": {"phi": 0.42}, "settings": {"template": {"model": model}},
                               "compute_optimal": {"bptt_k": {"4": 2}}}))  # fmt: skip
    assert main(["equiv", "--fit", str(fit), "--r", "4", "--params", params]) == 0
    assert "truncated BPTT, last 2 loops" in capsys.readouterr().out
    assert main([*base, "--bptt-k", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bptt_k" in err and "1..r = 4" in err
