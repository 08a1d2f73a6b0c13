"""Issue 41's loop-count recipes: sampled depth (``depth_sampling: poisson-lognormal``) and a linear
curriculum (``loop_curriculum: linear:F``), each a minimal swap on the base run, priced by executed FLOPs."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import SEQ_LEN, tiny_config

from loopscale.accounting import flops_per_token
from loopscale.cli import main
from loopscale.config import ModelConfig, dump_yaml, from_dict, to_dict
from loopscale.data import PackedDataset
from loopscale.errors import UserError
from loopscale.train import checkpoint as ckpt
from loopscale.train import load_checkpoint_model, loop, train
from loopscale.train.config import TrainConfig
from loopscale.train.plan import curriculum_loops, loop_schedule, plan_run, sample_loops

torch.set_num_threads(1)

SAMPLED = {"depth_sampling": "poisson-lognormal"}
CURRICULUM = {"loop_curriculum": "linear:0.25"}
R4 = {"depth": 6, "r": 4}  # tiny_config's model with ℓ_rec = 1 and r = 4 (prelude 1, coda 1)


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def micro_flops(model: ModelConfig, loops: int, micro_batch: int = 4) -> int:
    """Executed training FLOPs of one micro-batch of ``micro_batch`` sequences at ``loops`` loops."""
    return flops_per_token(model, loops=loops) * micro_batch * SEQ_LEN


# ---------------------------------------------------------------------------------------------------------
# The schedules, without training.


@pytest.mark.parametrize("r", [2, 4, 8])
def test_the_depth_sampler_has_mean_r(r):
    draws = sample_loops(r, 0.5, 10_000, seed=0)
    assert draws.min() >= 1 and draws.dtype.kind == "i"
    assert abs(draws.mean() - r) < 4 * draws.std() / math.sqrt(len(draws))
    # a prefix of any longer draw (a resumed run replays it); another seed draws other counts
    assert np.array_equal(sample_loops(r, 0.5, 100, seed=0), draws[:100])
    assert not np.array_equal(sample_loops(r, 0.5, 100, seed=1), draws[:100])


def test_the_sampler_leaves_torch_s_generator_alone(dataset):
    state = torch.get_rng_state()
    plan = plan_run(tiny_config(dataset, **SAMPLED), PackedDataset(dataset))
    assert plan.schedule.sampled and torch.equal(torch.get_rng_state(), state)


def test_the_curriculum_ramps_from_1_to_r_over_the_first_fraction_of_steps():
    loops = curriculum_loops(4, Fraction(1, 4), 40).tolist()
    assert loops[0] == 1 and loops[10:] == [4] * 30  # R = 10 ramp steps, r from the end of the ramp on
    assert loops[:10] == [1, 1, 2, 2, 2, 3, 3, 3, 3, 4]  # 1 + round(3·s/10), halves rounded up
    assert all(a <= b for a, b in zip(loops, loops[1:]))
    # ⌈F·S⌉ exactly: 0.1 · 30 = 3.0000000000000004 in floats, 3 ramp steps here
    assert curriculum_loops(5, Fraction("0.1"), 30).tolist()[:4] == [1, 2, 4, 5]  # (4 steps: 1, 2, 3, 4)
    assert curriculum_loops(8, Fraction(1, 2), 1).tolist() == [1]


@pytest.mark.parametrize("budget_steps", [7.3, 20.5, 41.0])
def test_the_curriculum_spends_the_budget_on_more_tokens(dataset, budget_steps):
    probe = tiny_config(dataset, model=R4)
    budget = budget_steps * flops_per_token(probe.model) * probe.batch_tokens
    base = tiny_config(dataset, model=R4, steps=None, budget=budget)
    cfg = tiny_config(dataset, model=R4, steps=None, budget=budget, **CURRICULUM)
    ds = PackedDataset(dataset)
    base_plan, plan = plan_run(base, ds), plan_run(cfg, ds)
    schedule = plan.schedule

    def executed(steps: int) -> int:  # an independent count: Σ over steps of F(T_s)·B
        return sum(flops_per_token(cfg.model, loops=t) * cfg.batch_tokens
                   for t in curriculum_loops(4, Fraction(1, 4), steps).tolist())

    assert schedule.loops_at(0) == [1, 1] and schedule.loops_at(plan.steps - 1) == [4, 4]
    assert schedule.executed_flops() == executed(plan.steps)
    # the step count nearest the budget (as round(C / (F·B)) is for the base), within one step's FLOPs
    nearest = min(abs(executed(s) - budget) for s in range(1, 3 * plan.steps))
    assert abs(executed(plan.steps) - budget) == nearest
    assert abs(schedule.executed_flops() - budget) <= schedule.step_flops(plan.steps - 1)
    assert plan.tokens > base_plan.tokens and plan.steps > base_plan.steps
    assert schedule.nominal_flops() == base_plan.flops_per_token * plan.tokens
    assert plan.lr_tokens == base_plan.lr_tokens  # the base run's LR data rule: a pair shares its peak LRs


def test_sampled_steps_come_nearest_the_budget(dataset):
    probe = tiny_config(dataset, model=R4)
    budget = 15.2 * flops_per_token(probe.model) * probe.batch_tokens
    cfg = tiny_config(dataset, model=R4, steps=None, budget=budget, **SAMPLED)
    schedule = loop_schedule(cfg, micro_batches=2)
    draws = sample_loops(4, 0.5, 2 * schedule.steps + 2, cfg.seed).reshape(-1, 2)
    assert np.array_equal(schedule.loops, draws[: schedule.steps])  # one draw per micro-batch, in order

    def executed(steps: int) -> int:
        return sum(micro_flops(cfg.model, t) for t in draws[:steps].ravel().tolist())

    assert executed(schedule.steps) == schedule.executed_flops()
    assert abs(executed(schedule.steps) - budget) <= min(abs(executed(s) - budget) for s in (
        schedule.steps - 1, schedule.steps + 1))
    assert schedule.nominal_flops() == flops_per_token(cfg.model) * cfg.batch_tokens * schedule.steps


# ---------------------------------------------------------------------------------------------------------
# Training runs.


def test_a_sampled_run_logs_its_depths_and_records_executed_flops(dataset, tmp_path):
    probe = tiny_config(dataset, model=R4)
    budget = 6.3 * flops_per_token(probe.model) * probe.batch_tokens
    cfg = tiny_config(dataset, model=R4, steps=None, budget=budget, **SAMPLED)
    result = train(cfg, tmp_path / "run")
    lines = metrics(tmp_path / "run")
    assert [m["step"] for m in lines] == list(range(1, result["steps"] + 1))
    assert all(len(m["loops"]) == 2 and min(m["loops"]) >= 1 for m in lines)  # 8 rows in micro-batches of 4
    executed = 0
    for m in lines:
        executed += sum(micro_flops(cfg.model, t) for t in m["loops"])
        assert m["flops"] == executed
    assert result["executed_flops"] == executed
    assert executed == plan_run(cfg, PackedDataset(dataset)).schedule.executed_flops()
    assert result["nominal_flops"] == result["flops_per_token"] * result["tokens"]
    assert result["tokens"] == result["steps"] * cfg.batch_tokens
    assert result["mean_loops"] == pytest.approx(np.mean([t for m in lines for t in m["loops"]]))
    assert result["config"]["model"]["r"] == 4 and result["config"]["depth_sampling"] == "poisson-lognormal"
    # validation runs at the nominal r
    model, _ = load_checkpoint_model(tmp_path / "run")
    rows = torch.from_numpy(PackedDataset(dataset).rows("val", 0, 16))
    with torch.no_grad():
        logits = model(rows[:, :-1], r=4)
    loss = F.cross_entropy(logits.flatten(0, 1).double(), rows[:, 1:].flatten())
    assert result["val_loss"] == pytest.approx(loss.item(), rel=1e-6)


def test_a_curriculum_run_trains_more_tokens_than_its_base_at_one_budget(dataset, tmp_path):
    probe = tiny_config(dataset, model=R4)
    budget = 6.3 * flops_per_token(probe.model) * probe.batch_tokens
    base = train(tiny_config(dataset, model=R4, steps=None, budget=budget), tmp_path / "base")
    result = train(tiny_config(dataset, model=R4, steps=None, budget=budget, **CURRICULUM), tmp_path / "run")
    loops = [m["loops"] for m in metrics(tmp_path / "run")]
    ramp = math.ceil(result["steps"] / 4)
    assert loops[0] == [1, 1] and loops[ramp:] == [[4, 4]] * (result["steps"] - ramp)
    assert result["tokens"] > base["tokens"] and result["nominal_flops"] > base["nominal_flops"]
    assert abs(result["executed_flops"] - budget) <= 2 * micro_flops(probe.model, 4)
    assert base["executed_flops"] == base["nominal_flops"] == base["flops_per_token"] * base["tokens"]
    assert "loops" not in metrics(tmp_path / "base")[0]  # the base run's metrics are as they were
    assert result["peak_lrs"] == base["peak_lrs"]


def test_every_recipe_starts_from_the_base_model_s_parameters(dataset, tmp_path, monkeypatch):
    """Same seed, same shared parameters: the depth draws use their own generator, and Parcae's injection
    replays linear injection's draw (the training path, captured when the optimisers are built)."""
    initial = []
    real = loop.build_optimizers

    def capture(model, *args, **kwargs):
        initial.append({k: v.clone() for k, v in model.state_dict().items()})
        return real(model, *args, **kwargs)

    monkeypatch.setattr(loop, "build_optimizers", capture)
    variants = [({}, {}), (SAMPLED, {}), (CURRICULUM, {}), ({}, {"injection": "parcae"}),
                ({}, {"injection": "parcae-diag"})]
    for i, (recipe, model) in enumerate(variants):
        cfg = tiny_config(dataset, steps=2, seed=5, model={**R4, "injection": "linear", **model}, **recipe)
        assert train(cfg, tmp_path / f"run{i}")["status"] == "ok"
    base = initial[0]
    assert len(initial) == len(variants)
    for state in initial[1:]:
        shared = set(state) & set(base)
        assert len(shared) >= len(base) - 1  # all but linear's W_inj
        assert all(torch.equal(state[k], base[k]) for k in shared)


@pytest.fixture
def killed_sampled_run(dataset, tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(reference run, the same run stopped as by kill -9 right after its step-4 checkpoint)."""
    cfg = tiny_config(dataset, model=R4, steps=8, checkpoint_every_steps=2, **SAMPLED)
    (tmp_path / "run.yaml").write_text(dump_yaml(cfg))
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "ref")]) == 0
    save = ckpt.save_checkpoint

    def save_then_die(run_dir, step, *args, **kwargs):
        save(run_dir, step, *args, **kwargs)
        if step == 4:
            raise SystemExit(137)

    with monkeypatch.context() as m:
        m.setattr(ckpt, "save_checkpoint", save_then_die)
        with pytest.raises(SystemExit):
            main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "k9")])
    assert ckpt.read_state(ckpt.latest_checkpoint(tmp_path / "k9"))["loop_draws"] == 4 * 2
    return tmp_path / "ref", tmp_path / "k9"


def test_a_resumed_sampled_run_replays_the_same_depths(killed_sampled_run):
    ref, run = killed_sampled_run
    assert main(["train", "--out", str(run), "--resume"]) == 0
    ref_lines, run_lines = metrics(ref), metrics(run)
    assert [m["loops"] for m in run_lines] == [m["loops"] for m in ref_lines]
    assert len({t for m in ref_lines for t in m["loops"]}) > 1  # the depths did vary
    assert [m["loss"] for m in run_lines] == [m["loss"] for m in ref_lines]  # bit for bit on CPU
    assert json.loads((run / "result.json").read_text())["val_loss"] == json.loads(
        (ref / "result.json").read_text())["val_loss"]


def test_resuming_a_sampled_run_with_other_micro_batches_is_refused(killed_sampled_run, capsys):
    _, run = killed_sampled_run
    before = (run / "metrics.jsonl").read_text()
    assert main(["train", "--out", str(run), "--resume", "--micro-batch", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "depth draws" in err and "micro_batch" in err and "\n" not in err
    assert (run / "metrics.jsonl").read_text() == before


# ---------------------------------------------------------------------------------------------------------
# Bad values: one line, exit 2.


@pytest.mark.parametrize("changes,match", [
    ({"depth_sampling": "uniform"}, "depth_sampling must be poisson-lognormal"),
    ({"depth_sampling": "poisson-lognormal", "depth_sigma": 0}, "depth_sigma must be > 0"),
    ({"depth_sigma": -0.5}, "depth_sigma must be > 0"),
    ({"loop_curriculum": "linear:1"}, "ramp fraction F in \\(0, 1\\)"),
    ({"loop_curriculum": "linear:0"}, "ramp fraction F in \\(0, 1\\)"),
    ({"loop_curriculum": "linear:-0.2"}, "ramp fraction F in \\(0, 1\\)"),
    ({"loop_curriculum": "linear:1.5"}, "ramp fraction F in \\(0, 1\\)"),
    ({"loop_curriculum": "linear"}, "loop_curriculum must be 'linear:F'"),
    ({"loop_curriculum": "cosine:0.25"}, "loop_curriculum must be 'linear:F'"),
    ({**SAMPLED, **CURRICULUM}, "at most one of depth_sampling and loop_curriculum"),
    ({**SAMPLED, "model": {"r": 1, "injection": "linear"}}, "needs model.r >= 2"),
    ({**CURRICULUM, "model": {"r": 1}}, "needs model.r >= 2"),
    ({**SAMPLED, "model": {"bptt_k": 1}}, "unset model.bptt_k"),
    ({**SAMPLED, "model": {"injection": "hyperconnect"}}, "hyperconnection scalars exist for r loops only"),
])
def test_bad_recipe_values_are_one_line_user_errors(dataset, tmp_path, capsys, changes, match):
    data = to_dict(tiny_config(dataset))
    data = {**data, **changes, "model": {**data["model"], **changes.get("model", {})}}
    with pytest.raises(UserError, match=match) as exc:
        from_dict(TrainConfig, data, "train")
    assert "\n" not in str(exc.value)
    (tmp_path / "run.yaml").write_text(dump_yaml(data))
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err and not (tmp_path / "run").exists()


def test_a_curriculum_with_hyperconnections_stays_within_r(dataset, tmp_path):
    """HC scalars exist for r loops: a curriculum (T <= r) may use them, a sampler (T > r) may not."""
    cfg = tiny_config(dataset, steps=3, model={**R4, "injection": "hyperconnect"}, **CURRICULUM)
    result = train(cfg, tmp_path / "run")
    assert result["status"] == "ok" and [m["loops"] for m in metrics(tmp_path / "run")][0] == [1, 1]
