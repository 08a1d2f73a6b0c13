"""``loopscale price``'s honest stopping (pairs.sequential) and its loop (analysis.price): boundaries scaled
on the looks' joint law, the stopping rule in the loop on simulated sequences, the plan's power before it
spends (--dry-run), and the workflow's looks, stop and files on a base whose variant runs are simulated
(nothing is trained here)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from loopscale.analysis.price import PriceSettings, plan_price, price, read_price, read_test_time
from loopscale.errors import UserError
from loopscale.io import claim_folder
from loopscale.pairs.results import PriceResult
from loopscale.pairs.sequential import honest_target, look_counts, scale_boundary, shape
from loopscale.present.price_text import price_verdict
from loopscale.recipes import resolve_recipe
from loopscale.report.price import write_price_report
from loopscale.sweep.plan import plan_sweep

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "results" / "laptop-factorial"


@pytest.mark.parametrize(("kind", "last"), [("pocock", 2.555), ("obf", 2.087)])
def test_a_scaled_family_on_ten_correlated_normal_looks_gives_the_published_boundaries(kind, last):
    """Jennison & Turnbull (Tables 2.1, 2.3): K = 10 equally spaced looks at two-sided α = 0.05 on a plain
    normal statistic (Z_k of the cumulative sum, corr √(j/k)): a constant boundary 2.555, O'Brien–Fleming
    2.087 at the last look. Independent looks would give 2.80 (Bonferroni)."""
    rng = np.random.default_rng(0)
    z = np.abs(np.cumsum(rng.standard_normal((200_000, 10)), axis=1) / np.sqrt(np.arange(1, 11)))
    fractions = np.arange(1, 11) / 10
    scale = scale_boundary(lambda c: float(np.mean((z > c).any(axis=1))), fractions, kind, 0.05)
    assert scale * shape(fractions, kind)[-1] == pytest.approx(last, abs=0.02)


def test_the_boundary_shapes_and_the_honest_target():
    t = np.array([0.25, 0.5, 1.0])
    assert shape(t, "obf") == pytest.approx([2.0, 2**0.5, 1.0]) and shape(t, "pocock") == pytest.approx(1.0)
    with pytest.raises(ValueError):
        shape([0.0, 1.0], "obf")
    with pytest.raises(ValueError):
        shape(t, "bonferroni")
    assert 0.03 < honest_target(0.04, 2000) < 0.04
    assert honest_target(0.04, 10**8) == pytest.approx(0.04, abs=1e-4)
    counts = look_counts(4, 2, 11)
    assert counts == [4, 6, 8, 10, 11]


def test_the_scaled_boundary_holds_wrong_attribution_where_the_full_alpha_at_every_look_does_not():
    """16 planned pairs, looks after 4, 6, …, 16: a boundary scaled on one set of simulated null sequences
    names a wrong term in at most ~α of fresh ones under every null truth, intervals never hold 0 where a
    term is named; 2.05 (|t|'s 4% point for a normal) at every look names one far more often."""
    from loopscale.pairs.rule import Simulator, known_covariance, sequence_nulls
    from loopscale.pairs.sequential import at_critical, run_sequences, scaled_boundary, simulate_looks

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
    nulls = sequence_nulls(available)
    boundary = scaled_boundary(
        simulate_looks(sim, counts, available, nulls, 1000, np.random.default_rng(3)), 16, available, 0.04,
        "obf",
    )
    assert boundary.critical == pytest.approx(sorted(boundary.critical, reverse=True))  # strict early
    assert boundary.spent[-1] <= boundary.target < 0.04 and all(0.9 < level < 1 for level in boundary.levels)
    fresh = simulate_looks(sim, counts, available, nulls, 1000, np.random.default_rng(4))
    for stats in fresh:
        runs = run_sequences(stats, at_critical(available, boundary.critical))
        assert runs.wrong.mean() <= 0.04 + 0.012 and not runs.disagree.any()
    full = run_sequences(fresh[0], at_critical(available, [2.054] * len(counts)))
    assert full.wrong.mean() > 0.06


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
    return PriceSettings(recipe=resolve_recipe("hyperconnections"), base=BASE, out=tmp_path / "price",
                         max_hours=0.25, bootstrap=20, restarts=40, sequences=200,
                         data_root=tmp_path / "data", **kw)  # fmt: skip


def test_price_stops_at_the_first_look_that_names_an_effect_and_writes_its_report(tmp_path, monkeypatch):
    calls: list = []
    _fake_training(monkeypatch, -0.08, calls)
    lines: list = []
    result = price(_settings(tmp_path), echo=lines.append)
    first = result.looks[0]
    # the run ends with its verdict (a number and its interval), then where the report is
    assert lines[-2].startswith("hyperconnections: ") and " [" in lines[-2] and "report.md" in lines[-1]
    *before, last = result.looks  # O'Brien–Fleming-like: 4 pairs rarely name -0.08 nats, 6 do
    assert all(k.stop is None and not k.chosen_terms for k in before) and last.stop == "decided"
    assert calls == [k.pairs for k in result.looks] and {"offset"} <= set(result.effects.chosen_terms)
    assert first.size < 0.04 and result.effects.ci_level == pytest.approx(1 - last.size)  # the stop's level
    assert first.critical == result.plan.boundary.critical[0] > 2  # the boundary is strict at the first look
    saved = json.loads((tmp_path / "price" / "price.json").read_text())
    assert PriceResult.from_dict(saved) == result  # price.json is the typed result, read back whole
    assert not Path(saved["base"]).is_absolute() and not Path(saved["settings"]["out"]).is_absolute()
    report = (tmp_path / "price" / "report.md").read_text()
    assert report.startswith("# Price of hyperconnections") and f"look {last.look} of 3" in report
    assert (tmp_path / "price" / "loss_change_by_r.png").is_file()


def test_price_without_an_effect_looks_to_the_end_and_names_nothing(tmp_path, monkeypatch):
    calls: list = []
    _fake_training(monkeypatch, 0.0, calls)
    plan = plan_price(_settings(tmp_path))
    result = price(_settings(tmp_path), echo=lambda line: None)
    assert calls == list(plan.looks.counts) == [4, 6, 8]
    assert [k.stop for k in result.looks] == [None, None, "last look"]
    assert result.effects.chosen_terms == ()
    boundary = result.plan.boundary
    assert [k.critical for k in result.looks] == list(boundary.critical) and boundary.shape == "obf"
    assert [k.spent for k in result.looks] == list(boundary.spent) and boundary.spent[-1] <= 0.04
    assert result.power is not None and "power" in price_verdict(result)  # what it could not reach
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


def test_dry_run_prints_the_plan_and_its_power_and_writes_nothing(tmp_path):
    before = sorted((p, p.stat().st_mtime_ns) for p in (ROOT / "results").rglob("*"))
    run = subprocess.run(
        [sys.executable, "-m", "loopscale", "price", "hyperconnections", "--reuse", str(BASE), "--dry-run",
         "--max-hours", "0.25", "--sequences", "100", "--bootstrap", "20", "--out", str(tmp_path / "price")],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "nothing is trained" in lines[0] and "O'Brien–Fleming-like" in lines[1]
    assert sum(line.startswith("look ") for line in lines) == 3  # 8 pairs within 0.25 h: looks at 4, 6, 8
    assert sum("power" in line for line in lines) >= 10 and "80% power needs" in run.stdout
    assert not (tmp_path / "price").exists() and list(tmp_path.iterdir()) == []
    assert sorted((p, p.stat().st_mtime_ns) for p in (ROOT / "results").rglob("*")) == before


@pytest.mark.parametrize("flags", [["--max-hours", "-1"], ["--sequences", "5"]])
def test_dry_run_with_bad_input_ends_in_one_line(tmp_path, flags):
    run = subprocess.run(
        [sys.executable, "-m", "loopscale", "price", "parcae", "--reuse", str(BASE), "--dry-run", *flags],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and run.stdout == ""


@pytest.mark.parametrize("arm", ["laptop-parcae", "laptop-curriculum", "laptop-sampled-depth"])
def test_published_prices_read_and_re_render_byte_identically(tmp_path, arm):
    """price.json files written before the boundaries (no boundary, no power) still read, and their report
    renders as published."""
    published = Path(__file__).resolve().parent / "fixtures" / "before-49" / arm  # as published then
    for name in ("price.json", "test_time.json"):
        if (published / name).is_file():
            shutil.copy(published / name, tmp_path / name)
    result = read_price(tmp_path / "price.json")
    assert result.plan.boundary is None and result.power is None
    write_price_report(result, tmp_path, read_test_time(tmp_path))
    assert (tmp_path / "report.md").read_text() == (published / "report.md").read_text()


PUBLISHED_PRICES = sorted(
    str(path.parent.relative_to(ROOT / "results"))
    for pattern in ("*/price.json", "*/against-*/price.json")
    for path in (ROOT / "results").glob(pattern)
)


@pytest.mark.parametrize("arm", PUBLISHED_PRICES)
def test_every_published_price_report_is_what_its_price_json_renders_today(tmp_path, arm):
    """A published report.md is the current renderer's output of its price.json (and test_time.json): a
    report written by older code is re-rendered (`price --render`) before it is published."""
    published = ROOT / "results" / arm
    for name in ("price.json", "test_time.json"):
        if (published / name).is_file():
            shutil.copy(published / name, tmp_path / name)
    write_price_report(read_price(tmp_path / "price.json"), tmp_path, read_test_time(tmp_path))
    assert (tmp_path / "report.md").read_text() == (published / "report.md").read_text()


def test_a_pocock_plan_holds_every_look_to_one_value_between_the_obf_extremes(tmp_path):
    obf = plan_price(_settings(tmp_path)).looks.boundary
    pocock = plan_price(_settings(tmp_path, boundary="pocock")).looks.boundary
    assert pocock.shape == "pocock" and len(set(pocock.critical)) == 1
    assert obf.critical[-1] < pocock.critical[0] < obf.critical[0]
    with pytest.raises(UserError):
        plan_price(_settings(tmp_path, boundary="bonferroni"))


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


def test_a_separating_plan_prints_its_separation_and_pairs_the_variants_r1_runs(tmp_path, monkeypatch):
    """``--plan separate`` for a recipe that changes plain models (issue 51): the start prints the plan's
    cosine, condition number and Δφ's SE beyond an offset, price.json stores them (``plan.separation``) and
    the plan itself, and the variant's r = 1 runs pair with the base's r = 1 runs, so the analysis can tell
    an every-model change from an offset."""
    calls: list = []
    _fake_training(monkeypatch, -0.08, calls)
    lines: list = []
    result = price(_settings(tmp_path, plan="separate"), echo=lines.append)
    sep = result.plan.separation
    assert sep is not None and sep.plain >= 1 and sep.criterion.startswith("A-optimal")
    said = next(line for line in lines if "separation (" in line)
    assert f"cosine {sep.cosine:.3f}" in said and f"condition number {sep.condition:.2f}" in said
    assert f"beyond an offset {sep.se_delta_phi:.4f}" in said
    saved = read_price(tmp_path / "price" / "price.json")
    assert saved.plan.separation == sep and saved.settings["plan"] == "separate"
    assert "every" in result.effects.available and result.effects.anchors == "paired"


def test_a_price_begun_on_the_old_plan_turns_separating_from_its_own_pairs(tmp_path, monkeypatch):
    """``--plan separate`` on a folder begun with the delta_phi plan (every published arm): its pairs so far
    stay first, in their order, so every look replays on the same cells, and the criterion continues from
    them; asked for delta_phi again, it stays separating."""
    from dataclasses import replace

    import loopscale.sweep.runner
    from loopscale.analysis.price import paired_rows
    from loopscale.config import dump_yaml

    calls: list = []
    _fake_training(monkeypatch, 0.0, calls)
    fake = loopscale.sweep.runner.run_sweep

    def run_sweep(spec, out, workers=None, pairs=None):  # and its spec on disk, as the real one writes it
        done = fake(spec, out, workers, pairs)
        if spec is not None:
            (Path(out) / "sweep.yaml").write_text(dump_yaml(spec))
        return done

    monkeypatch.setattr(loopscale.sweep.runner, "run_sweep", run_sweep)
    old = price(_settings(tmp_path), echo=lambda line: None)
    first = paired_rows(_settings(tmp_path))
    assert len(first) == old.looks[-1].pairs == 8
    assert first == plan_price(_settings(tmp_path)).order[:8]
    longer = {"max_hours": 0.5}
    new = price(replace(_settings(tmp_path, plan="separate"), **longer), echo=lambda line: None)
    rows = paired_rows(_settings(tmp_path))
    assert rows[:8] == first and len(rows) >= new.looks[-1].pairs
    assert new.settings["plan"] == "separate" and new.plan.separation.criterion.startswith("A-optimal")
    again = price(replace(_settings(tmp_path), **longer), echo=lambda line: None)
    assert again.settings["plan"] == "separate" and again.looks == new.looks
