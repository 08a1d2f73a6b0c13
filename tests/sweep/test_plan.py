"""`plan --preset paper` reproduces method §5.2 (N per r, steps, tokens) and §14 V1 (N_once / N_rec)."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.cli import main
from loopscale.errors import UserError
from loopscale.sweep import plan_sweep, preset
from loopscale.sweep.plan import MeasuredTimes, ThroughputProbe, format_plan, run_name
from loopscale.train.perf import MachineLoad

# Spec §5.2, columns: C | s | d | N (M) r=1/2/4/8 | steps r=1/2/4/8 | D = steps·B (B tokens) r=1/2/4/8
SPEC_GRID = """
4.64e17 | 6 | 384 | 35.4/21.5/14.5/10.9 | 3726/3698/3671/3618 | 0.977/0.969/0.962/0.948
4.64e17 | 8 | 512 | 62.9/38.3/25.7/19.4 | 2432/2411/2391/2351 | 0.638/0.632/0.627/0.616
4.64e17 | 10 | 640 | 98.3/59.8/40.2/30.3 | 1722/1706/1690/1659 | 0.451/0.447/0.443/0.435
4.64e17 | 12 | 768 | 141.6/86.1/57.8/43.7 | 1288/1274/1262/1237 | 0.338/0.334/0.331/0.324
1.00e18 | 6 | 384 | 35.4/21.5/14.5/10.9 | 8030/7971/7912/7798 | 2.105/2.090/2.074/2.044
1.00e18 | 8 | 512 | 62.9/38.3/25.7/19.4 | 5242/5197/5153/5066 | 1.374/1.362/1.351/1.328
1.00e18 | 10 | 640 | 98.3/59.8/40.2/30.3 | 3712/3677/3642/3575 | 0.973/0.964/0.955/0.937
1.00e18 | 12 | 768 | 141.6/86.1/57.8/43.7 | 2775/2747/2719/2665 | 0.727/0.720/0.713/0.699
1.00e18 | 14 | 896 | 192.7/117.2/78.7/59.4 | 2156/2133/2110/2066 | 0.565/0.559/0.553/0.542
2.15e18 | 8 | 512 | 62.9/38.3/25.7/19.4 | 11270/11173/11078/10893 | 2.954/2.929/2.904/2.856
2.15e18 | 10 | 640 | 98.3/59.8/40.2/30.3 | 7981/7905/7831/7687 | 2.092/2.072/2.053/2.015
2.15e18 | 12 | 768 | 141.6/86.1/57.8/43.7 | 5966/5905/5845/5730 | 1.564/1.548/1.532/1.502
2.15e18 | 14 | 896 | 192.7/117.2/78.7/59.4 | 4636/4586/4537/4443 | 1.215/1.202/1.189/1.165
2.15e18 | 16 | 1024 | 251.7/153.1/102.8/77.6 | 3710/3669/3628/3549 | 0.973/0.962/0.951/0.930
4.64e18 | 10 | 640 | 98.3/59.8/40.2/30.3 | 17224/17060/16900/16589 | 4.515/4.472/4.430/4.349
4.64e18 | 12 | 768 | 141.6/86.1/57.8/43.7 | 12875/12744/12615/12366 | 3.375/3.341/3.307/3.242
4.64e18 | 14 | 896 | 192.7/117.2/78.7/59.4 | 10005/9898/9792/9588 | 2.623/2.595/2.567/2.513
4.64e18 | 16 | 1024 | 251.7/153.1/102.8/77.6 | 8007/7917/7829/7659 | 2.099/2.075/2.052/2.008
4.64e18 | 18 | 1152 | 318.6/193.8/130.1/98.2 | 6558/6481/6406/6262 | 1.719/1.699/1.679/1.642
4.64e18 | 20 | 1280 | 393.3/239.2/160.6/121.3 | 5471/5406/5342/5218 | 1.434/1.417/1.400/1.368
1.00e19 | 12 | 768 | 141.6/86.1/57.8/43.7 | 27748/27465/27188/26650 | 7.274/7.200/7.127/6.986
1.00e19 | 16 | 1024 | 251.7/153.1/102.8/77.6 | 17257/17063/16873/16505 | 4.524/4.473/4.423/4.327
1.00e19 | 18 | 1152 | 318.6/193.8/130.1/98.2 | 14133/13968/13807/13496 | 3.705/3.662/3.619/3.538
1.00e19 | 20 | 1280 | 393.3/239.2/160.6/121.3 | 11792/11650/11512/11245 | 3.091/3.054/3.018/2.948
1.00e19 | 24 | 1536 | 566.3/344.5/231.2/174.6 | 8576/8468/8363/8160 | 2.248/2.220/2.192/2.139
2.15e19 | 18 | 1152 | 318.6/193.8/130.1/98.2 | 30386/30031/29685/29016 | 7.966/7.872/7.782/7.606
2.15e19 | 24 | 1536 | 566.3/344.5/231.2/174.6 | 18438/18206/17980/17545 | 4.833/4.773/4.713/4.599
2.15e19 | 28 | 1792 | 770.8/468.9/314.7/237.7 | 14019/13837/13659/13318 | 3.675/3.627/3.581/3.491
2.15e19 | 34 | 2176 | 1136.5/691.4/464.1/350.4 | 9873/9740/9610/9361 | 2.588/2.553/2.519/2.454
"""
# Spec §14 V1: (s, r) → (N, N_once, N_rec), paper split
V1 = {
    (6, 2): (21_538_944, 7_082_112, 14_456_832),
    (6, 4): (14_457_984, 7_082_112, 7_375_872),
    (6, 8): (10_917_504, 7_082_112, 3_835_392),
    (10, 4): (40_152_960, 19_667_840, 20_485_120),
    (12, 2): (86_135_040, 28_320_000, 57_815_040),
    (20, 8): (121_260_800, 78_657_280, 42_603_520),
    (24, 4): (231_240_192, 113_263_104, 117_977_088),
    (34, 8): (350_420_864, 227_302_784, 123_118_080),
}
RS = (1, 2, 4, 8)


def spec_cells() -> list[dict]:
    cells = []
    for line in SPEC_GRID.strip().splitlines():
        c, s, d, n_m, steps, d_b = (x.strip() for x in line.split("|"))
        cells.append(
            {
                "budget": float(c),
                "s": int(s),
                "width": int(d),
                "n_m": [float(x) for x in n_m.split("/")],
                "steps": [int(x) for x in steps.split("/")],
                "tokens_b": [float(x) for x in d_b.split("/")],
            }
        )
    return cells


def plan_csv(capsys, *args) -> list[dict]:
    assert main(["plan", *args, "--format", "csv", "--no-probe"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_paper_plan_reproduces_spec_grid_table(capsys):
    rows = plan_csv(capsys, "--preset", "paper")
    assert len(rows) == 116
    by_cell = {(float(r["budget"]), int(r["width"]), int(r["r"])): r for r in rows}
    assert len(by_cell) == 116
    cells = spec_cells()
    assert len(cells) == 29
    for cell in cells:
        assert cell["width"] == 64 * cell["s"]
        for i, r in enumerate(RS):
            row = by_cell[(cell["budget"], cell["width"], r)]
            n, n_once, n_rec = int(row["n"]), int(row["n_once"]), int(row["n_rec"])
            assert n_once + n_rec == n
            assert round(n / 1e6, 1) == cell["n_m"][i], (cell, r)
            assert int(row["steps"]) == cell["steps"][i], (cell, r)
            assert int(row["tokens"]) == int(row["steps"]) * 262_144
            assert round(int(row["tokens"]) / 1e9, 3) == cell["tokens_b"][i], (cell, r)
            assert int(row["total_flops"]) == int(row["flops_per_token"]) * int(row["tokens"])
            assert abs(int(row["total_flops"]) / cell["budget"] - 1) < 2e-3  # F·B·steps within ~0.1% of C


def test_paper_plan_splits_match_v1():
    runs = {(run.width // 64, run.r): run for run in plan_sweep(preset("paper"))}
    for (s, r), (n, n_once, n_rec) in V1.items():
        run = runs[(s, r)]
        assert (run.n, run.n_once, run.n_rec) == (n, n_once, n_rec)
    assert runs[(6, 1)].n == 35_405_952 and runs[(34, 1)].n == 1_136_487_808
    assert runs[(6, 1)].flops_per_token == 475_047_936


def test_case_study_presets_match_spec_5_3():
    bptt = plan_sweep(preset("paper-truncated-bptt"))
    hc = plan_sweep(preset("paper-hyperconnections"))
    assert len(bptt) == 89 and len(hc) == 83
    for runs, looped in ((bptt, 69), (hc, 63)):
        anchors = [r for r in runs if r.r == 1]
        assert len(anchors) == 20 and all(r.group == "anchor" for r in anchors)
        assert len([r for r in runs if r.r > 1]) == looped
        assert max(r.budget for r in runs) == 4.64e18
    paper = {(r.budget, r.width): r for r in plan_sweep(preset("paper")) if r.r == 1}
    for anchor in (r for r in bptt if r.r == 1):  # the anchors are the main grid's r = 1 runs, unchanged
        assert anchor.steps == paper[(anchor.budget, anchor.width)].steps
    for run in (r for r in bptt if r.r > 1):
        assert run.model.bptt_k == -(-run.r // 2)
    # method §14 V3: truncated k = 2 at (1e18, s = 10, r = 4) → 4,771 steps;
    # HC (2.15e18, s = 18, r = 8) → 3,038
    assert next(r for r in bptt if (r.budget, r.width, r.r) == (1e18, 640, 4)).steps == 4771
    assert next(r for r in hc if (r.budget, r.width, r.r) == (2.15e18, 1152, 8)).steps == 3038
    assert all(r.model.layout().injection == "hyperconnect" for r in hc if r.r > 1)
    # method §14 V3: median D_trunc / D_full over the 69 truncated runs is 1.316
    from loopscale.config import replace
    from loopscale.paper import grid_runs

    ratios = []
    for run in (r for r in bptt if r.r > 1):
        (row,) = grid_runs(
            {run.budget: (run.width,)}, rs=(run.r,), template=replace(run.model, bptt_k=None), width_unit=1
        )
        ratios.append(run.tokens / row["tokens"])
    assert sorted(ratios)[len(ratios) // 2] == pytest.approx(1.316, abs=5e-4)


# ---------------------------------------------------------------- learning rates of the three paper grids
# Written from the formulas of method §3.1, §4.2–4.3, §7.3 without the package's accounting or LR code.
T, V_PAD, D0 = 2048, 32_064, 640


def spec_flops(d: int, r: int, k: int, hc: bool) -> int:
    """F per token (§4.2–4.3): depth 20; prelude = coda = 2 for r > 1; k back-propagated loops."""
    n_b = 12 * d * d + 2 * d
    once_layers, rec_layers = (0, 20) if r == 1 else (4, 16 // r)
    p_inject = 0 if r == 1 else (2 * 2 + 2 * 2) * d if hc else 2 * d * d  # HC: (K² + 2K)·d, K = 2
    p_loop = rec_layers * n_b + p_inject
    f = r - k
    return (
        6 * (once_layers * n_b + V_PAD * d)
        + (2 * f + 6 * k) * p_loop
        + 12 * d * T * once_layers
        + (4 * f + 12 * k) * d * T * rec_layers
    )


def spec_d_ref(r: int, rule: str = "released") -> int:
    """10 × (N_once + r·N_rec) of the s = 10 reference: 2-4-2 linear for r > 1, 20 layers for r = 1."""
    n_b = 12 * D0 * D0 + 2 * D0
    if r == 1:
        return 10 * (20 * n_b + 3 * D0)
    count_r = r if rule == "released" else 4
    return 10 * ((4 * n_b + 3 * D0) + count_r * (4 * n_b + 2 * D0 * D0))


def spec_lrs(budget: float, d: int, r: int, k: int, hc: bool, rule: str = "released") -> dict[str, float]:
    tokens = int(budget / spec_flops(d, r, k, hc))  # D = int(C / F); B = 2^18, so no batch factor
    width = (d / D0) ** -0.5
    return {
        "matrix": 0.014 * (tokens / spec_d_ref(r, rule)) ** -0.32,
        "embed": 0.3 * width,
        "unembed": 0.004 * width,
        "norm": 0.005 * width,
        "hc": 0.01 * width,
        "injection": 0.01 * width,  # Parcae's injection (not in the paper): the HC scalars' rule and value
    }


def run_lrs(spec, run, **optim) -> dict[str, float]:
    """The LRs a planned run trains with: its TrainConfig, D from lr_data_tokens, then peak_learning_rates."""
    from loopscale.config import from_dict
    from loopscale.sweep.plan import run_train_config
    from loopscale.train.config import TrainConfig, merge
    from loopscale.train.optim import lr_data_tokens, peak_learning_rates

    cfg = from_dict(TrainConfig, merge(run_train_config(spec, run), {"optim": optim}), "train")
    tokens = lr_data_tokens(cfg, run.flops_per_token)
    return peak_learning_rates(cfg.optim, cfg.model, cfg.batch_tokens, tokens)


def test_spec_d_ref_values():
    assert {r: spec_d_ref(r) for r in RS} == {
        1: 983_315_200, 2: 606_380_800, 4: 1_016_083_200, 8: 1_835_488_000
    }


@pytest.mark.parametrize("name", ["paper", "paper-truncated-bptt", "paper-hyperconnections"])
def test_paper_grid_learning_rates_match_the_spec(name):
    spec = preset(name)
    runs = plan_sweep(spec)
    assert len(runs) == {"paper": 116, "paper-truncated-bptt": 89, "paper-hyperconnections": 83}[name]
    ratios: dict[int, set[float]] = {2: set(), 4: set(), 8: set()}
    for run in runs:
        k = run.model.effective_bptt_k
        hc = run.model.layout().injection == "hyperconnect"
        assert run.flops_per_token == spec_flops(run.width, run.r, k, hc), run.name
        # The true vocabulary in the config (logits sliced to it), the padded one in wte/lm_head and FLOPs.
        assert (run.model.vocab_size, run.model.padded_vocab) == (32_001, V_PAD)
        got, want = run_lrs(spec, run), spec_lrs(run.budget, run.width, run.r, k, hc)
        assert got == pytest.approx(want, rel=1e-12), run.name
        if run.r > 1:
            prose = run_lrs(spec, run, d_ref_rule="prose")
            assert prose == pytest.approx(spec_lrs(run.budget, run.width, run.r, k, hc, "prose"), rel=1e-12)
            ratios[run.r].add(round(got["matrix"] / prose["matrix"], 3))
    # The released rule vs the paper's prose: 0.848× at r = 2, 1.208× at r = 8, equal at r = 4 (method §7.3).
    assert ratios == {2: {0.848}, 4: {1.0}, 8: {1.208}}


def test_hyperconnection_scalars_count_in_n_rec():
    hc = {(run.budget, run.width, run.r): run for run in plan_sweep(preset("paper-hyperconnections"))}
    for run in (r for r in hc.values() if r.r > 1):
        d = run.width
        n_b = 12 * d * d + 2 * d
        assert run.n_once == 4 * n_b + 3 * d  # unchanged: prelude, coda, model-level gains
        assert run.n_rec == (16 // run.r) * n_b + run.r * 8  # r·(K² + 2K) scalars, K = 2


def test_plan_formats_agree(capsys):
    rows = plan_csv(capsys, "--preset", "demo")
    assert main(["plan", "--preset", "demo", "--format", "json", "--no-probe"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in doc["runs"]] == [r["run"] for r in rows]
    assert doc["total_flops"] == sum(int(r["total_flops"]) for r in rows)
    assert main(["plan", "--preset", "demo", "--no-probe"]) == 0
    table = capsys.readouterr().out
    assert all(r["run"] in table for r in rows)


@pytest.mark.parametrize(
    ("name", "n_budgets", "span", "rs"),
    [
        ("cpu", 3, 5, {1, 2, 4, 8}),
        ("demo", 3, 1.25, {1, 2, 4, 8}),
        ("laptop", 4, 3.5, {1, 2, 4, 8}),
        ("laptop-staggered", 4, 5, {1, 2, 4, 8}),
    ],
)
def test_scaled_presets_are_iso_depth_grids(name, n_budgets, span, rs):
    spec = preset(name)
    runs = plan_sweep(spec)
    budgets = sorted({r.budget for r in runs})
    assert len(budgets) >= n_budgets and budgets[-1] / budgets[0] >= span
    assert {r.r for r in runs} == rs
    for run in runs:
        assert run.model.layout().effective_depth == spec.model["depth"]
        assert run.steps >= 10, run.name


@pytest.mark.parametrize(("name", "n_runs"), [("laptop", 68), ("laptop-staggered", 72)])
def test_laptop_preset_spends_its_flops_on_the_blocks_and_reads_each_token_once(name, n_runs):
    """The laptop designs (docs/sweeps.md): at d ≥ 32 the blocks N counts take over half the training FLOPs
    (6·(N_once + r·N_rec) of F, the rest is attention and the unembedding), and no run reads more tokens
    than the 8.84M-token training split of the bpe1024-T128 default dataset."""
    runs = plan_sweep(preset(name))
    assert len(runs) == n_runs
    for run in runs:
        share = 6 * (run.n_once + run.r * run.n_rec) / run.flops_per_token
        if run.width >= 32:
            assert share > 0.5, (run.name, share)
        assert run.tokens <= 8_835_984, run.name


@settings(max_examples=40, deadline=None)
@given(
    budget=st.floats(min_value=1e5, max_value=1e25, allow_nan=False),
    width=st.integers(1, 4096),
    r=st.sampled_from(RS),
    seed=st.integers(0, 10**6),
    n_seeds=st.integers(1, 3),
)
def test_run_names_are_folder_safe_and_distinct(budget, width, r, seed, n_seeds):
    from loopscale.sweep.spec import RunGroup

    group = RunGroup(name="g", rs=[r], grid=[])
    name = run_name(group, budget, width, r, seed, n_seeds)
    assert "/" not in name and "+" not in name and " " not in name
    assert name != run_name(group, budget, width + 1, r, seed, n_seeds)
    assert name != run_name(group, budget * 1.01, width, r, seed, n_seeds)


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "configs" / "sweeps").glob("*.yaml")))
def test_example_specs_plan(path, capsys):
    assert main(["plan", str(path), "--no-probe", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] and doc["sweep"] == path.stem


def test_plan_probe_prints_a_labelled_estimate(tmp_path, capsys):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        "name: tiny\nbatch_tokens: 64\n"
        "model: {depth: 4, prelude: 1, coda: 1, head_dim: 16, vocab_size: 64, seq_len: 16}\n"
        "train: {optim: {ref_r_looped: 2}}\n"
        "groups: [{name: main, rs: [1, 2], grid: [{budget: 1e9, widths: [16, 32, 48]}]}]\n"
    )
    assert main(["plan", str(spec), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "est. time" in out.splitlines()[0]
    assert "ESTIMATE of wall time on this machine" in out and "with 2 worker(s)" in out
    assert re.search(r"GFLOP/s per run d=16: [\d.]+, d=32: [\d.]+, d=48: [\d.]+", out)


def test_estimate_spreads_runs_over_workers():
    spec = preset("demo")
    runs = plan_sweep(spec)
    probe = ThroughputProbe(flops_per_s={16: 1e10, 48: 4e10}, device="cpu", threads=1, workers=2)
    assert probe.rate(16) == 1e10 and probe.rate(8) == 1e10 and probe.rate(96) == 4e10
    assert probe.rate(32) == pytest.approx(1e10 * 4 ** (math.log(2) / math.log(3)))  # log-linear in width
    doc = json.loads(format_plan(spec, runs, "json", probe))
    expected = sum(r.total_flops / probe.rate(r.width) for r in runs) / 2
    assert doc["estimate"]["seconds"] == pytest.approx(expected, abs=0.1)


def test_estimate_adds_each_runs_start_and_final_evaluation():
    spec = preset("laptop-staggered")  # its widest runs, d = 96, sit on a probed width
    runs = plan_sweep(spec)
    probe = ThroughputProbe(
        flops_per_s={32: 3e10, 96: 6e10},
        device="cpu",
        threads=1,
        workers=2,
        eval_tokens_per_s={32: 1e5, 96: 2.5e4},
        val_tokens=131_072,
        start_seconds=3.0,
    )
    run = next(r for r in runs if r.width == 96)
    assert probe.overhead_seconds(run) == pytest.approx(3.0 + 131_072 / 2.5e4)
    assert probe.seconds(run) == pytest.approx(run.total_flops / 6e10 + 3.0 + 131_072 / 2.5e4)
    doc = json.loads(format_plan(spec, runs, "json", probe))
    assert doc["estimate"]["seconds"] == pytest.approx(sum(probe.seconds(r) for r in runs) / 2, abs=0.1)


def _timings_table(path: Path, rows: list[tuple[int, int, int, float, float, str]]) -> Path:
    """A results.csv with (width, r, steps, train_time_s, wall_time_s, status) rows; the rest blank."""
    from loopscale.sweep.results import RESULT_COLUMNS

    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=RESULT_COLUMNS)
        writer.writeheader()
        for i, (width, r, steps, train, wall, status) in enumerate(rows):
            writer.writerow(
                {"run": f"run{i}", "width": width, "r": r, "steps": steps, "train_time_s": train,
                 "wall_time_s": wall, "status": status}
            )
    return path


def test_measured_times_cost_a_run_at_its_width_and_r_from_a_finished_sweep(tmp_path):
    """steps × the median s/step at (width, r) + the median overhead; failed runs and other (width, r) do
    not count; a (width, r) the sweep never ran is a one-line error, as is a table without timings."""
    table = _timings_table(
        tmp_path / "results.csv",
        [
            (16, 1, 100, 10.0, 12.0, "ok"),  # 0.1 s/step, 2 s overhead
            (16, 1, 200, 30.0, 33.0, "ok"),  # 0.15
            (16, 1, 400, 80.0, 84.0, "ok"),  # 0.2
            (16, 1, 100, 900.0, 999.0, "failed"),
            (16, 8, 100, 50.0, 52.0, "ok"),  # 0.5
        ],
    )
    times = MeasuredTimes.from_table(table, workers=2)
    runs = [r for r in plan_sweep(preset("laptop-staggered")) if r.width == 16]
    run1 = next(r for r in runs if r.r == 1)
    run8 = next(r for r in runs if r.r == 8)
    assert times.seconds(run1) == pytest.approx(run1.steps * 0.15 + 2.5)  # overheads 2, 3, 4, 2
    assert times.seconds(run8) == pytest.approx(run8.steps * 0.5 + 2.5)
    shares = times.wall_shares([run1, run8])
    assert shares == pytest.approx([times.seconds(run1) / 2, times.seconds(run8) / 2])
    other = next(r for r in plan_sweep(preset("laptop-staggered")) if r.width != 16)
    missing = rf"no run at width {other.width}, r = {other.r}.*widths \[16\], its r \[1, 8\]"
    with pytest.raises(UserError, match=missing):
        times.seconds(other)
    empty = _timings_table(tmp_path / "empty.csv", [(16, 1, 100, 10.0, 12.0, "failed")])
    with pytest.raises(UserError, match="no finished run with measured train and wall times"):
        MeasuredTimes.from_table(empty, workers=1)


def test_plan_timings_estimates_from_measured_run_times(tmp_path, capsys):
    """``plan --timings``: the estimate is the sum of the measured costs over the workers, labelled with its
    source in the table and the JSON; no probe runs."""
    rows = [(w, r, 100, 0.01 * w * (1 + r / 8) * 100, 0.01 * w * (1 + r / 8) * 100 + 4.0, "ok")
            for w in (16, 32, 48) for r in (1, 2, 4, 8)]
    table = _timings_table(tmp_path / "results.csv", rows)
    args = ["plan", "--preset", "demo", "--workers", "2", "--timings", str(table)]
    assert main([*args, "--format", "json"]) == 0
    estimate = json.loads(capsys.readouterr().out)["estimate"]
    runs = plan_sweep(preset("demo"))
    expected = sum(run.steps * 0.01 * run.width * (1 + run.r / 8) + 4.0 for run in runs) / 2
    assert estimate["seconds"] == pytest.approx(expected, abs=0.1)
    assert estimate["workers"] == 2 and "measured run times" in estimate["note"]
    assert main(args) == 0
    assert f"2 worker(s) (the measured run times of {table}" in capsys.readouterr().out


def test_a_busy_probe_says_its_estimate_is_pessimistic():
    spec = preset("demo")
    runs = plan_sweep(spec)
    base = dict(flops_per_s={16: 1e10}, device="cpu", threads=1, workers=2)
    busy = format_plan(spec, runs, "table", ThroughputProbe(**base, load=MachineLoad(4.2, 2)))
    idle = format_plan(spec, runs, "table", ThroughputProbe(**base, load=MachineLoad(0.2, 2)))
    # the one busy-machine wording that sweep, demo and train use too (MachineLoad.note)
    assert "machine busy: load 4.2 on 2 cores; the probe's rates read low" in busy and "pessimistic" in busy
    assert "busy" not in idle
    assert json.loads(format_plan(spec, runs, "json", ThroughputProbe(**base, load=MachineLoad(4.2, 2))))[
        "estimate"
    ]["load_per_core"] == pytest.approx(2.1)


def test_default_layout_is_one_single_threaded_run_per_core_for_small_cpu_models(monkeypatch):
    from loopscale.config import replace
    from loopscale.sweep.plan import ONE_THREAD_MAX_WIDTH, default_layout

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    spec = preset("laptop")
    runs = plan_sweep(spec)
    layout = default_layout(spec, runs)
    assert (layout.workers, layout.threads) == (2, 1)
    assert default_layout(spec, runs[:1]).workers == 1  # never more workers than runs
    wide = [r for r in plan_sweep(preset("paper")) if r.width > ONE_THREAD_MAX_WIDTH]
    assert (default_layout(spec, wide).workers, default_layout(spec, wide).threads) == (1, None)
    ddp = replace(spec, nproc=2)
    assert default_layout(ddp, runs).workers == 1
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert default_layout(spec, runs).workers == 1


def test_loop_recipes_and_parcae_reach_the_run_configs_of_a_group():
    """Issue 41: a group's ``model:`` (injection: parcae) and ``train:`` (depth_sampling, loop_curriculum)
    reach its runs' configs as injection: hyperconnect and bptt do; a bad value is refused naming the run."""
    from loopscale.config import from_dict
    from loopscale.sweep.plan import check_runnable, run_train_config
    from loopscale.sweep.spec import SweepSpec
    from loopscale.train.config import TrainConfig

    def spec(curriculum: str) -> SweepSpec:
        grid = [{"budget": 1e12, "widths": [32]}]
        return from_dict(SweepSpec, {
            "name": "recipes", "batch_tokens": 2048,
            "model": {"depth": 10, "prelude": 1, "coda": 1, "head_dim": 16, "vocab_size": 1024,
                      "seq_len": 128},
            "groups": [
                {"name": "main", "rs": [1, 2], "grid": grid},
                {"name": "parcae", "rs": [2], "grid": grid, "model": {"injection": "parcae"}},
                {"name": "sampled", "rs": [2, 4], "grid": grid,
                 "train": {"depth_sampling": "poisson-lognormal", "depth_sigma": 0.3}},
                {"name": "curriculum", "rs": [4], "grid": grid, "train": {"loop_curriculum": curriculum}},
            ]}, "spec")

    good = spec("linear:0.25")
    runs = {run.name: run for run in plan_sweep(good)}
    check_runnable(good, list(runs.values()), data=False)
    configs = {name: from_dict(TrainConfig, run_train_config(good, run), "train")
               for name, run in runs.items()}
    assert configs["parcae_C1e12_d32_r2"].model.injection == "parcae"
    assert configs["sampled_C1e12_d32_r4"].depth_sampling == "poisson-lognormal"
    assert configs["sampled_C1e12_d32_r4"].depth_sigma == 0.3
    assert configs["curriculum_C1e12_d32_r4"].loop_curriculum == "linear:0.25"
    main_r2 = configs["main_C1e12_d32_r2"]
    assert main_r2.loop_recipe is None and main_r2.model.injection == "auto"
    bad = spec("linear:1.5")
    with pytest.raises(UserError, match="run curriculum_C1e12_d32_r4: loop_curriculum must be 'linear:F'"):
        check_runnable(bad, plan_sweep(bad), data=False)
