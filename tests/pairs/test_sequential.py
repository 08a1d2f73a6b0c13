"""``loopscale price``'s honest stopping (design.sequential) and its loop (analysis.price): α spent over the
looks, the stopping rule in the loop on simulated sequences, and the workflow's looks, stop and files on a
base whose variant runs are simulated (nothing is trained here)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.analysis.price import PriceSettings, plan_price, price
from loopscale.io import claim_folder
from loopscale.pairs.results import PriceResult
from loopscale.pairs.sequential import look_counts, look_sizes, simulations_for, spent
from loopscale.sweep.plan import plan_sweep

BASE = Path(__file__).resolve().parents[2] / "results" / "laptop-factorial"


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(4, 60), st.floats(0.001, 0.2))
def test_the_looks_spend_at_most_alpha_and_each_look_gets_a_positive_share(first, batch, extra, alpha):
    most = first + extra
    counts = look_counts(first, batch, most)
    assert counts[0] == first and counts[-1] == most and counts == sorted(set(counts))
    sizes = look_sizes(counts, most, alpha)
    assert all(s > 0 for s in sizes)
    assert math.isclose(sum(sizes), alpha, rel_tol=1e-9)  # all of α by the last look, never more
    assert spent(0.0, alpha) == 0.0 and spent(1.0, alpha) == pytest.approx(alpha)
    assert all(simulations_for(s) * s >= 40 for s in sizes)  # every quantile rests on 40 tail tables


def test_spending_keeps_false_attribution_down_where_the_full_alpha_at_every_look_does_not():
    """No effect, 16 planned pairs, looks after 4, 6, …, 16: with α spent the rule names an effect in at
    most ~5% of sequences; testing at the full α at every look names one more often (optional stopping)."""
    from loopscale.pairs.rule import Simulator, known_covariance
    from loopscale.pairs.sequential import sequential_calibration

    r = np.tile([2, 4, 8, 2, 8, 4, 8, 2], 2)
    width = np.repeat([32.0, 64.0], 8)
    slope = -np.log(r) * width / 48  # ∂L/∂φ grows with r (and with width): separable from an offset
    keys = sorted(set(zip(r.tolist(), width.tolist())))
    cluster = np.array([keys.index(k) for k in zip(r.tolist(), width.tolist())])
    noise = {"iid": 0.016**2, "cluster": 0.01**2}
    known = known_covariance(cluster, 0.016, 0.01)
    sim = Simulator(
        np.zeros(16), slope, np.zeros((1, 16)), slope[None], np.ones(16, bool), cluster, noise, 12, known
    )
    counts = look_counts(4, 2, 16)
    available = ("offset", "delta_phi")
    fitted = {m: dict.fromkeys(m, 0.0) for m in (("offset",), ("delta_phi",), available)}
    rates = {}
    for name, sizes in (("spent", look_sizes(counts, 16, 0.04)), ("full", [0.04] * len(counts))):
        out = sequential_calibration(sim, counts, sizes, available, fitted, {}, 400, np.random.default_rng(3))
        assert out.disagreement == 0.0 and out.coverage is None
        rates[name] = out.wrong
    assert rates["spent"] <= 0.065 and rates["full"] > rates["spent"]


def _base_rows() -> list[dict]:
    with open(BASE / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _fake_training(monkeypatch, offset: float, calls: list) -> None:
    """run_sweep trains nothing; collect returns, for each group of the spec, the base run at its cell with
    ``offset`` nats added (and the group's name)."""
    import loopscale.data
    import loopscale.sweep.collect
    import loopscale.sweep.runner

    base = _base_rows()
    specs: dict = {}

    def run_sweep(spec, out, workers=None, pairs=None):
        Path(out).mkdir(parents=True, exist_ok=True)
        claim_folder(Path(out), "sweep")  # as the real one does once it has written sweep.yaml
        if spec is not None:
            specs["spec"] = spec
        calls.append(len(specs["spec"].groups))
        return {g.name: "ok" for g in specs["spec"].groups}

    def collect(out):  # like a real folder: every run trained so far, including later looks' pairs
        rows = []
        for run in plan_sweep(specs["spec"]):
            cell = (run.budget, str(run.width), str(run.r), str(run.seed))
            row = next(r for r in base if (float(r["budget"]), r["width"], r["r"], r["seed"]) == cell)
            rows.append({**row, "run": run.name, "loss": float(row["loss"]) + offset})
        return rows, None, None

    monkeypatch.setattr(loopscale.sweep.runner, "run_sweep", run_sweep)
    monkeypatch.setattr(loopscale.sweep.collect, "collect", collect)
    monkeypatch.setattr(loopscale.data, "prepare_default", lambda *a, **k: "data/packed/fake")


def _settings(tmp_path: Path, **kw) -> PriceSettings:
    return PriceSettings(recipe="hyperconnections", base=BASE, out=tmp_path / "price", max_hours=0.25,
                         bootstrap=20, restarts=40, data_root=tmp_path / "data", **kw)  # fmt: skip


def test_price_stops_at_the_first_look_that_names_an_effect_and_writes_its_report(tmp_path, monkeypatch):
    calls: list = []
    _fake_training(monkeypatch, -0.08, calls)
    lines: list = []
    result = price(_settings(tmp_path), echo=lines.append)
    first = result.looks[0]
    # the run ends with its verdict (a number and its interval), then where the report is
    assert lines[-2].startswith("hyperconnections: ") and " [" in lines[-2] and "report.md" in lines[-1]
    assert len(result.looks) == 1 and first.stop == "decided" and first.pairs == 4 and calls == [4]
    assert {"offset"} <= set(result.effects.chosen_terms)
    assert first.size < 0.04 and result.effects.ci_level == pytest.approx(1 - first.size)
    saved = json.loads((tmp_path / "price" / "price.json").read_text())
    assert PriceResult.from_dict(saved) == result  # price.json is the typed result, read back whole
    assert not Path(saved["base"]).is_absolute() and not Path(saved["settings"]["out"]).is_absolute()
    report = (tmp_path / "price" / "report.md").read_text()
    assert report.startswith("# Price of hyperconnections") and "look 1 of 3" in report
    assert (tmp_path / "price" / "loss_change_by_r.png").is_file()


def test_price_without_an_effect_looks_to_the_end_and_names_nothing(tmp_path, monkeypatch):
    calls: list = []
    _fake_training(monkeypatch, 0.0, calls)
    plan = plan_price(_settings(tmp_path))
    result = price(_settings(tmp_path), echo=lambda line: None)
    assert calls == list(plan.looks.counts) == [4, 6, 8]
    assert [k.stop for k in result.looks] == [None, None, "last look"]
    assert result.effects.chosen_terms == ()
    assert sum(k.size for k in result.looks) == pytest.approx(0.04)
    pooled = result.looks[-1].cluster_sd
    assert pooled.df >= 0 and pooled.cluster_sd > 0
    assert np.isfinite(result.looks[-1].delta_phi_half_width)


def test_a_rerun_replays_each_look_on_its_own_pairs_and_trains_nothing_finished(tmp_path, monkeypatch):
    """A folder that already holds every look's runs (a finished or a lengthened price) is replayed: look k
    reads its first pairs only, so it answers as it did the first time, and no finished run is retrained."""
    import loopscale.sweep.rundir

    calls: list = []
    _fake_training(monkeypatch, 0.0, calls)
    first = price(_settings(tmp_path), echo=lambda line: None)
    monkeypatch.setattr(loopscale.sweep.rundir, "run_state", lambda root, name: SimpleNamespace(status="ok"))
    calls.clear()
    again = price(_settings(tmp_path), echo=lambda line: None)
    assert calls == [] and [k.pairs for k in again.looks] == [4, 6, 8]
    assert again.looks == first.looks
    assert again.effects.n_pairs == 8


def test_each_variant_run_names_the_base_run_it_pairs_with(tmp_path):
    """run.json's ``pairs_with`` under a trainer: every variant run maps to the base run of its cell and seed,
    one base run per variant run."""
    from loopscale.analysis.price import _pairs_with

    settings = _settings(tmp_path, trainer="train.py {run_dir}")
    pairs = _pairs_with(settings, plan_price(settings))
    base = {row["run"]: row for row in _base_rows()}
    assert len(set(pairs.values())) == len(pairs) >= 4
    for variant, path in pairs.items():
        row = base[Path(path).name]
        assert Path(path).parent == BASE / "runs"
        group, cell = variant.split("_", 1)  # the group prefix apart, a run's name is its cell (and seed)
        assert row["run"].split("_", 1)[1].startswith(cell) and group.endswith(f"-s{row['seed']}")
