"""The training run in-process: budget → steps, metrics, learning, validation loss, micro-batches, failure."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import SEQ_LEN, tiny_config
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.accounting import count_params, flops_per_token
from loopscale.cli import main
from loopscale.config import dump_yaml
from loopscale.data import PackedDataset
from loopscale.errors import UserError
from loopscale.train import load_checkpoint_model, load_train_config, train
from loopscale.train.optim import lr_multiplier

torch.set_num_threads(1)

RESULT_KEYS = {
    "status",
    "reason",
    "config",
    "n",
    "n_once",
    "n_rec",
    "n_embed",
    "flops_per_token",
    "budget",
    "tokens",
    "steps",
    "val_loss",
    "wall_time_s",
    "tokens_per_s",
}


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_budget_sets_steps_and_the_run_folder_follows_the_contract(dataset, tmp_path):
    probe = tiny_config(dataset)
    f = flops_per_token(probe.model)
    budget = 4.4 * f * probe.batch_tokens  # round(4.4) = 4 steps
    cfg = tiny_config(dataset, steps=None, budget=budget)
    result = train(cfg, tmp_path / "run")
    assert RESULT_KEYS <= set(result)
    assert result["status"] == "ok" and result["reason"] is None
    assert result["steps"] == 4 and result["tokens"] == 4 * cfg.batch_tokens and result["budget"] == budget
    assert result["flops_per_token"] == f
    assert {k: result[k] for k in ("n", "n_once", "n_rec", "n_embed")} == count_params(cfg.model).as_dict()
    assert json.loads((tmp_path / "run" / "result.json").read_text()) == json.loads(json.dumps(result))
    # the resolved config, with the CPU thread count the run used and whether it compiled (reused on --resume)
    resolved = dataclasses.replace(cfg, threads=1, compile=False)
    assert (tmp_path / "run" / "config.yaml").read_text() == dump_yaml(resolved)
    assert not (tmp_path / "run" / "checkpoints").exists()  # removed once the final weights are written
    lines = metrics(tmp_path / "run")
    assert [m["step"] for m in lines] == [1, 2, 3, 4]
    peak = result["peak_lrs"]["matrix"]
    for m in lines:
        assert set(m) >= {"step", "loss", "lr", "tokens", "tokens_per_s", "mfu"}
        assert m["tokens"] == m["step"] * cfg.batch_tokens
        assert m["lr"] == pytest.approx(peak * lr_multiplier(m["step"] - 1, 4))
        assert m["mfu"] == pytest.approx(f * m["tokens_per_s"] / cfg.peak_flops)


@pytest.mark.parametrize("recipe", ["muonh", "adamw"])
def test_both_recipes_learn(dataset, tmp_path, recipe):
    cfg = tiny_config(dataset, steps=24, optim={"recipe": recipe})
    result = train(cfg, tmp_path / "run")
    losses = [m["loss"] for m in metrics(tmp_path / "run")]
    assert losses[0] == pytest.approx(math.log(320), abs=0.05)  # near-uniform start (tiny lm_head init)
    assert result["val_loss"] < losses[0] - 1.0  # 24 steps of a real recipe learn the word statistics


def test_validation_loss_is_the_token_weighted_mean_over_val_tokens(dataset, tmp_path):
    val_tokens = 5 * SEQ_LEN + 7  # a partial last row
    cfg = tiny_config(dataset, steps=2)
    cfg.data.val_tokens = val_tokens
    result = train(cfg, tmp_path / "run")
    model, loaded_cfg = load_checkpoint_model(tmp_path / "run")
    assert loaded_cfg == dataclasses.replace(cfg, threads=1, compile=False)  # records threads, compile
    rows = torch.from_numpy(PackedDataset(dataset).rows("val", 0, 6))
    with torch.no_grad():
        logits = model(rows[:, :-1])
    per_token = F.cross_entropy(logits.flatten(0, 1).double(), rows[:, 1:].flatten(), reduction="none")
    assert result["val_loss"] == pytest.approx(per_token[:val_tokens].mean().item(), rel=1e-6)
    assert result["val_tokens"] == val_tokens


def test_results_do_not_depend_on_the_micro_batch(dataset, tmp_path):
    a = train(tiny_config(dataset, steps=3, micro_batch=2), tmp_path / "a")
    b = train(tiny_config(dataset, steps=3, micro_batch=8), tmp_path / "b")
    for ma, mb in zip(metrics(tmp_path / "a"), metrics(tmp_path / "b")):
        assert ma["loss"] == pytest.approx(mb["loss"], rel=1e-5)
    assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5)


def test_compiled_run_follows_the_eager_run(dataset, tmp_path):
    """compile: true (inductor) trains the same model as eager: same losses to float tolerance, same
    result fields."""
    eager = train(tiny_config(dataset, steps=3), tmp_path / "eager")
    compiled = train(tiny_config(dataset, steps=3, compile=True), tmp_path / "compiled")
    for me, mc in zip(metrics(tmp_path / "eager"), metrics(tmp_path / "compiled"), strict=True):
        assert mc["loss"] == pytest.approx(me["loss"], rel=1e-4)
    assert compiled["val_loss"] == pytest.approx(eager["val_loss"], rel=1e-4)
    assert compiled["steps"] == eager["steps"] and compiled["tokens"] == eager["tokens"]


def test_non_finite_loss_stops_the_run_with_exit_code_3(dataset, tmp_path, capsys):
    cfg = tiny_config(dataset, steps=10, optim={"norm_lr": 1e30, "embed_lr": 1e30})
    (tmp_path / "run.yaml").write_text(dump_yaml(cfg))
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "run")]) == 3
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "failed" and "non-finite" in result["reason"]
    assert result["val_loss"] is None and result["steps_done"] < 10
    assert not (tmp_path / "run" / "model.safetensors").exists()
    assert "non-finite" in capsys.readouterr().err


def test_a_finished_run_is_returned_not_retrained(dataset, tmp_path):
    cfg = tiny_config(dataset, steps=2)
    first = train(cfg, tmp_path / "run")
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    with pytest.raises(UserError, match="already holds a run"):
        train(cfg, tmp_path / "run", resume=False)
    again = train(cfg, tmp_path / "run", resume=True)
    assert again == json.loads(json.dumps(first))
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before


def test_yaml_and_flags_merge_and_fill_the_model_from_the_dataset(dataset, tmp_path):
    (tmp_path / "run.yaml").write_text(
        f"data: {{path: {dataset}}}\nsteps: 3\nmodel: {{width: 64, head_dim: 32}}\n"
        f"batch_tokens: {4 * SEQ_LEN}\n"
    )
    cfg = load_train_config(
        tmp_path / "run.yaml", {"model": {"r": 2, "depth": 6}, "optim": {"matrix_lr": 0.02}}
    )
    assert (cfg.model.width, cfg.model.r, cfg.model.depth) == (64, 2, 6)
    assert (cfg.model.vocab_size, cfg.model.seq_len) == (320, SEQ_LEN)  # from the dataset's meta.json
    assert cfg.optim.matrix_lr == 0.02 and cfg.optim.embed_lr == 0.3 and cfg.steps == 3


@settings(max_examples=15, deadline=None)
@given(
    width=st.sampled_from([32, 64, 96]),
    r=st.sampled_from([1, 2, 4]),
    steps=st.integers(1, 10**6),
    recipe=st.sampled_from(["muonh", "adamw"]),
    lr=st.floats(1e-5, 1.0),
    seed=st.integers(0, 2**31),
)
def test_resolved_config_round_trips_through_yaml(
    tmp_path_factory, dataset, width, r, steps, recipe, lr, seed
):
    cfg = tiny_config(
        dataset,
        model={"width": width, "r": r, "depth": 6},
        steps=steps,
        seed=seed,
        optim={"recipe": recipe, "matrix_lr": lr},
    )
    path = tmp_path_factory.mktemp("yaml") / "config.yaml"
    path.write_text(dump_yaml(cfg))
    assert load_train_config(path) == cfg
