"""``loopscale fit / equiv / compare``: the JSON document, figures, and one-line errors with exit 2."""

from __future__ import annotations

import contextlib
import csv
import io
import json

import pytest
import yaml

from loopscale.cli import main

from .conftest import DEMO_GRID, demo_like_grid, simulated_grid

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
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["fit", table, *CHEAP, "--json", str(tmp / "fit.json"), "--plots", str(tmp / "plots")])
    assert code == 0
    # the skipped run is one note line, not a Python warning with a source path
    assert err.getvalue().startswith("loopscale fit: note: ") and "skipped 1 run" in err.getvalue()
    assert ".py:" not in err.getvalue()
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
    assert all(isinstance(m["bracketed"], bool) for m in doc["cell_minima"])
    assert all((m["n_star"] is None) == (not m["bracketed"]) for m in doc["cell_minima"])
    assert doc["table"]["skipped"][0]["reason"].startswith("status failed")
    diag = doc["diagnostics"]
    assert set(diag) >= {"at_bound", "phi_identified", "phi_flags", "verdict", "ranking"}
    assert set(diag["at_bound"]) == {"point", "forms", "bootstrap_share"}
    assert diag["phi_identified"] is True and diag["verdict"] == "identified"  # a code: no sentence
    prof = doc["profile"]
    for key in ("phi", "objective", "deviance", "threshold", "level", "interval", "open"):
        assert key in prof, key
    assert "agrees_with_bootstrap" in prof and "disagreement" in prof
    assert prof["open"] == [False, False] and prof["interval"][0] < doc["fit"]["phi"] < prof["interval"][1]
    template = doc["settings"]["template"]
    assert "paper" in template["source"] and template["matches_table"] is True


def test_fit_writes_png_and_svg_figures(fitted):
    tmp, _ = fitted
    from loopscale.present.plots import FIGURES  # collapse, loop_tax, isoflop, phi_profile, phi_bootstrap, …

    names = sorted(p.name for p in (tmp / "plots").iterdir() if p.name != ".loopscale")  # the folder's marker
    assert names == sorted(f"{n}.{ext}" for n in FIGURES for ext in ("png", "svg"))
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
    assert doc["delta_phi"]["estimate"] == pytest.approx(0, abs=1e-6) and not doc["delta_phi"]["resolved"]
    assert doc["runs"]["shared_anchors"] == 29
    assert doc["delta_phi_separate"]["estimate"] == pytest.approx(0, abs=1e-6)
    assert {row["shift"] for row in doc["optimum_shift"]} <= {"unchanged", "not bracketed"}
    # identical arms: no loss change, so the pairs see nothing beyond N and D
    assert doc["effects"]["chosen"] == "tokens only"
    said = capsys.readouterr().out.split(": ", 1)[1]
    assert said.startswith("nothing named beyond what N and D predict") and "the pairs rule out" in said


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


@pytest.mark.parametrize(
    "flags,words",
    [
        (["--phi", "nan", "--r", "4", "--params", "1e9"], "phi must be a finite number"),
        (["--phi", "inf", "--r", "4", "--params", "1e9"], "phi must be a finite number"),
        (["--phi", "7", "--r", "4", "--params", "1e9"], "fit box"),
        (["--phi", "0.5", "--r", "4", "--params", "nan"], "params must be a finite positive"),
        (["--phi", "0.5", "--r", "4", "--params", "inf"], "params must be a finite positive"),
        (["--phi", "0.5", "--r", "4", "--params", "0"], "params must be a finite positive"),
        (["--phi", "0.5", "--r", "4", "--params", "1e20"], "absurd"),
        (["--phi", "0.5", "--r", "0", "--params", "1e9"], "r must be a whole number >= 1"),
        (["--phi", "0.5", "--r", "3", "--params", "1e9"], "does not fit this template"),
        (["--phi", "0.5", "--r", "4", "--params", "1e5"], "smaller than one head"),
    ],
)
def test_equiv_refuses_bad_inputs_with_one_line(flags, words, capsys):
    assert main(["equiv", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("loopscale equiv: error:") and words in err, err


SMALL_MODEL = {"depth": 10, "prelude": 1, "coda": 1, "head_dim": 8, "vocab_size": 4096, "seq_len": 256}


def test_equiv_never_answers_below_one_head_at_a_small_template(tmp_path, capsys):
    cfg = tmp_path / "model.yaml"
    cfg.write_text(yaml.safe_dump(SMALL_MODEL))
    assert main(["equiv", "--phi", "0.5", "--r", "4", "--params", "1000", "--model-config", str(cfg)]) == 2
    assert "smaller than one head" in capsys.readouterr().err
    argv = ["equiv", "--phi", "0.5", "--r", "4", "--params", "1e5", "--model-config", str(cfg), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["width"] >= 8 and "model keys" in out["template"]


def test_output_paths_are_checked_before_any_work(tmp_path, capsys):
    """A bad --json / --plots path fails at once with one line, before the table is even read."""
    (tmp_path / "afile").write_text("x")
    cases = [
        (["--json", str(tmp_path)], "is a folder"),
        (["--json", str(tmp_path / "afile" / "fit.json")], "is a file, not a folder"),
        (["--plots", str(tmp_path / "afile")], "is not a folder"),
        (["--plots", str(tmp_path / "afile" / "plots")], "is a file, not a folder"),
    ]
    for flags, words in cases:
        assert main(["fit", "does-not-exist.csv", *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and flags[0] in err, err


def _sweep_folder(root, model=None):
    """A tiny loopscale sweep folder: sweep.yaml (the demo's template and grid) and its results table."""
    spec = {
        "name": "demo",
        "batch_tokens": 1024,
        "model": model or SMALL_MODEL,
        "groups": [
            {
                "name": "main",
                "rs": [1, 2, 4],
                "grid": [{"budget": c, "widths": [8 * s for s in scales]} for c, scales in DEMO_GRID.items()],
            }
        ],
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec))
    return _csv(root / "results.csv", demo_like_grid(noise=0.05, seed=0))


FAST = ["--restarts", "20", "--bootstrap", "0"]


def test_fit_takes_the_template_from_the_sweep_next_to_the_table(tmp_path, capsys):
    """The demo's bug: the frontier used the paper's template (width 128, N 3.9M) for a sweep run at
    widths 8–32. Next to a sweep.yaml the sweep's own template is used, and the CLI says which."""
    table = _sweep_folder(tmp_path / "sweep")
    assert main(["fit", table, *FAST, "--json", str(tmp_path / "fit.json")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("φ is not identified by these runs")
    assert "architecture template: sweep spec" in out and "sweep.yaml" in out
    doc = json.loads((tmp_path / "fit.json").read_text())
    template = doc["settings"]["template"]
    assert template["model"]["head_dim"] == 8 and template["model"]["depth"] == 10
    assert template["matches_table"] is True
    rows = [row for e in doc["compute_optimal"]["per_r"].values() for row in e["rows"]]
    assert rows and all(8 <= row["width"] and "within_widths_run" in row for row in rows)
    assert doc["diagnostics"]["phi_identified"] is False

    # The same table elsewhere: the paper's template does not reproduce its sizes → no frontier, a note.
    alone = _csv(tmp_path / "alone.csv", demo_like_grid(noise=0.05, seed=0))
    assert main(["fit", alone, *FAST, "--json", str(tmp_path / "alone.json")]) == 0
    doc = json.loads((tmp_path / "alone.json").read_text())
    assert doc["compute_optimal"] is None and doc["settings"]["template"]["matches_table"] is False
    assert any(n["code"] == "template_mismatch" and "N = " in n["error"] for n in doc["notes"])
    capsys.readouterr()


@pytest.mark.parametrize("kind", ["sweep folder", "sweep.yaml", "run config", "flat keys", "run folders"])
def test_model_config_accepts_sweeps_run_configs_and_flat_keys(tmp_path, capsys, kind):
    _sweep_folder(tmp_path / "sweep")
    (tmp_path / "t").mkdir()
    table = _csv(tmp_path / "t" / "results.csv", demo_like_grid(noise=0.05, seed=0))
    flags = []
    if kind == "sweep folder":
        flags = ["--model-config", str(tmp_path / "sweep")]
    elif kind == "sweep.yaml":
        flags = ["--model-config", str(tmp_path / "sweep" / "sweep.yaml")]
    elif kind == "run config":
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump({"model": {**SMALL_MODEL, "width": 16, "r": 2}, "seed": 0}))
        flags = ["--model-config", str(cfg)]
    elif kind == "flat keys":
        cfg = tmp_path / "model.yaml"
        cfg.write_text(yaml.safe_dump(SMALL_MODEL))
        flags = ["--model-config", str(cfg)]
    else:  # runs/NAME/config.yaml next to the table, no sweep.yaml
        for row in demo_like_grid(noise=0.05, seed=0):
            run = tmp_path / "t" / "runs" / row["run"]
            run.mkdir(parents=True)
            model = {**SMALL_MODEL, "width": row["width"], "r": row["r"]}
            (run / "config.yaml").write_text(yaml.safe_dump({"model": model}))
    assert main(["fit", table, *FAST, "--no-profile", "--json", str(tmp_path / "fit.json"), *flags]) == 0
    doc = json.loads((tmp_path / "fit.json").read_text())
    assert doc["settings"]["template"]["matches_table"] is True, doc["settings"]["template"]
    assert doc["settings"]["template"]["model"]["head_dim"] == 8 and doc["compute_optimal"] is not None
    assert doc["profile"] is None and doc["diagnostics"]["phi_identified"] is not None
    capsys.readouterr()


def test_equiv_uses_the_fits_template_and_warns_when_phi_is_not_identified(tmp_path, capsys):
    table = _sweep_folder(tmp_path / "sweep")
    assert main(["fit", table, *FAST, "--json", str(tmp_path / "fit.json")]) == 0
    capsys.readouterr()
    assert main(["equiv", "--fit", str(tmp_path / "fit.json"), "--r", "4", "--params", "3e4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("note: φ is not identified") and "template: the template recorded in" in out
