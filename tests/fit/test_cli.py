"""``loopscale fit / equiv / compare``: the JSON document, figures, and one-line errors with exit 2."""

from __future__ import annotations

import csv
import json

import pytest

from loopscale.cli import main

from .conftest import simulated_grid

KEYS = ("E", "A", "B", "alpha", "beta", "phi")
CHEAP = ["--restarts", "20", "--bootstrap", "10", "--bootstrap-restarts", "2"]


def _csv(path, rows):
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fit")
    rows = simulated_grid(noise=0.01, seed=4)
    rows[5].update(status="failed", reason="non-finite loss", loss="")
    table = _csv(tmp / "runs.csv", rows)
    with pytest.warns(UserWarning, match="skipped 1 run"):
        code = main(["fit", table, *CHEAP, "--json", str(tmp / "fit.json"), "--plots", str(tmp / "plots")])
    assert code == 0
    return tmp, json.loads((tmp / "fit.json").read_text())


def test_fit_document_layout(fitted):
    _, doc = fitted
    for key in (*KEYS, "objective", "r2"):
        assert isinstance(doc["fit"][key], float)
    for key in KEYS:
        lo, hi = doc["ci"][key]
        assert lo <= hi
    assert doc["ci"]["phi"][0] < doc["fit"]["phi"] < doc["ci"]["phi"][1]
    assert set(doc["forms"]) == {"joint", "phi=0", "phi=1"}
    assert doc["forms"]["phi=0"]["r2"] < doc["fit"]["r2"] and doc["forms"]["phi=1"]["phi"] == 1.0
    assert set(doc["per_r"]) == {"1", "2", "4", "8"} and "phi" not in doc["per_r"]["1"]
    assert set(doc["budget_halves"]) == {"low", "high"}
    assert doc["budget_halves"]["low"]["n_runs"] + doc["budget_halves"]["high"]["n_runs"] == 115
    assert doc["residuals"]["overall"]["n"] == 115 and set(doc["residuals"]["per_r"]) == {"1", "2", "4", "8"}
    assert len(doc["bootstrap"]["samples"]["phi"]) == 10
    assert [w["r"] for w in doc["loop_worth"]] == [2, 4, 8]
    assert set(doc["compute_optimal"]["per_r"]) == {"1", "2", "4", "8"}
    assert set(doc["compute_optimal_per_r_law"]) == {"1", "2", "4", "8"}
    assert len(doc["cell_minima"]) == 24 and len(doc["cell_gaps"]) > 0
    assert doc["table"]["skipped"][0]["reason"].startswith("status failed")


def test_fit_writes_png_and_svg_figures(fitted):
    tmp, _ = fitted
    names = sorted(p.name for p in (tmp / "plots").iterdir())
    assert names == sorted(
        f"{n}.{ext}" for n in ("isoflop", "phi_bootstrap", "residuals", "frontier") for ext in ("png", "svg")
    )
    assert (tmp / "plots" / "isoflop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (tmp / "plots" / "frontier.svg").read_text()[:2000]


def test_chinchilla_law_on_a_params_table(tmp_path, capsys):
    rows = [
        {"params": r["n"], "tokens": r["tokens"], "loss": r["loss"], "budget": r["budget"]}
        for r in simulated_grid(noise=0.005, seed=2)
        if r["r"] == 1
    ]
    assert (
        main(
            [
                "fit",
                _csv(tmp_path / "plain.csv", rows),
                "--law",
                "chinchilla",
                "--restarts",
                "20",
                "--bootstrap",
                "0",
                "--json",
                str(tmp_path / "c.json"),
            ]
        )
        == 0
    )
    doc = json.loads((tmp_path / "c.json").read_text())
    assert "phi" not in doc["fit"] and doc["ci"] == {} and doc["fit"]["form"] == "chinchilla"
    assert "chinchilla" in capsys.readouterr().out


def test_equiv_from_phi_and_from_a_fit(fitted, capsys):
    assert main(["equiv", "--phi", "0.459", "--r", "4", "--params", "1e9"]) == 0
    out = capsys.readouterr().out
    assert "1.8895" in out and "0.4083" in out and "0.5779" in out
    tmp, doc = fitted
    assert main(["equiv", "--fit", str(tmp / "fit.json"), "--r", "8", "--params", "1e9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["worth"] == pytest.approx(8 ** doc["fit"]["phi"])


def test_compare_two_tables(tmp_path, capsys):
    base = _csv(tmp_path / "base.csv", simulated_grid(noise=0.01, seed=9))
    assert main(["compare", base, base, *CHEAP, "--json", str(tmp_path / "cmp.json")]) == 0
    doc = json.loads((tmp_path / "cmp.json").read_text())
    assert doc["delta_phi"] == 0 and doc["ci"]["delta_phi"] == [0, 0] and doc["shared_r1_runs"] == 29
    assert "delta phi" in capsys.readouterr().out


def _bad_tables():
    rows = simulated_grid()
    return {
        "missing column": ([{k: v for k, v in r.items() if k != "tokens"} for r in rows], "missing column"),
        "negative N": ([{**r, "n_once": -1} if i == 0 else r for i, r in enumerate(rows)], "invalid n_once"),
        "zero tokens": ([{**r, "tokens": 0} if i == 3 else r for i, r in enumerate(rows)], "invalid tokens"),
        "NaN loss": ([{**r, "loss": "nan"} if i == 3 else r for i, r in enumerate(rows)], "invalid loss"),
        "five runs": (rows[:5], "only 5 usable"),
        "single r": ([r for r in rows if r["r"] == 4], "phi is unidentifiable"),
        "one budget": ([r for r in rows if r["budget"] == 1e18], "beta is unidentifiable"),
    }


@pytest.mark.parametrize("case", list(_bad_tables()))
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, case):
    rows, match = _bad_tables()[case]
    assert main(["fit", _csv(tmp_path / "bad.csv", rows), *CHEAP]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("loopscale fit: error:") and match in err


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "does-not-exist.csv"],
        ["fit", "x.csv", "--restarts", "0"],
        ["equiv", "--r", "4", "--params", "1e9"],
        ["equiv", "--phi", "0.5", "--r", "4", "--params", "-3"],
    ],
)
def test_bad_flags_exit_2(argv, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1
