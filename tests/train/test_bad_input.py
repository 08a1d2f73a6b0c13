"""Bad input to `loopscale train`: exit code 2, one line on stderr, nothing written or changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

from loopscale.cli import main
from loopscale.config import ModelConfig, dump_yaml
from loopscale.model import LoopedGPT
from loopscale.train import loop, train
from loopscale.train.checkpoint import latest_checkpoint, save_tensors

torch.set_num_threads(1)


def snapshot(folder: Path) -> dict[str, bytes]:
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fails_cleanly(argv: list[str], out: Path, capsys, match: str) -> str:
    before = snapshot(out)
    assert main(argv + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("loopscale train: error: "), err
    assert match in err, err
    assert snapshot(out) == before  # nothing written, nothing changed
    if not before:
        assert not out.exists()
    return err


@pytest.fixture
def config_file(dataset, tmp_path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(dump_yaml(tiny_config(dataset)))
    return path


def test_unknown_config_keys(config_file, tmp_path, capsys):
    config_file.write_text(config_file.read_text() + "learning_rate: 0.1\n")
    fails_cleanly(["train", "--config", str(config_file)], tmp_path / "out", capsys, "'learning_rate'")
    config_file.write_text(
        config_file.read_text()
        .replace("learning_rate: 0.1\n", "")
        .replace("  recipe: muonh", "  recipe: muonh\n  momentum: 0.9")
    )
    fails_cleanly(["train", "--config", str(config_file)], tmp_path / "out", capsys, "train.optim")


def test_unknown_d_ref_rule(config_file, tmp_path, capsys):
    text = config_file.read_text()
    assert "  d_ref_rule: released\n" in text  # the resolved config names the default
    config_file.write_text(text.replace("  d_ref_rule: released\n", "  d_ref_rule: paper\n"))
    out, match = tmp_path / "out", "d_ref_rule must be one of released, prose"
    fails_cleanly(["train", "--config", str(config_file)], out, capsys, match)


def test_r_that_does_not_divide_the_recurrent_depth(config_file, tmp_path, capsys):
    fails_cleanly(
        ["train", "--config", str(config_file), "--depth", "6", "--r", "3"],
        tmp_path / "out",
        capsys,
        "r=3 does not divide the recurrent depth 4",
    )


def test_width_not_divisible_by_head_dim(config_file, tmp_path, capsys):
    fails_cleanly(
        ["train", "--config", str(config_file), "--width", "40"],
        tmp_path / "out",
        capsys,
        "not divisible by head_dim 16",
    )


def test_budget_smaller_than_one_step(dataset, tmp_path, capsys):
    cfg = tiny_config(dataset, steps=None, budget=1e3)
    (tmp_path / "run.yaml").write_text(dump_yaml(cfg))
    fails_cleanly(
        ["train", "--config", str(tmp_path / "run.yaml")], tmp_path / "out", capsys, "smaller than one step"
    )


def test_missing_dataset(config_file, tmp_path, capsys):
    fails_cleanly(
        ["train", "--config", str(config_file), "--data", str(tmp_path / "nowhere")],
        tmp_path / "out",
        capsys,
        "does not exist",
    )


def copy_dataset(dataset: Path, to: Path) -> Path:
    shutil.copytree(dataset, to)
    return to


def test_empty_dataset(dataset, config_file, tmp_path, capsys):
    empty = copy_dataset(dataset, tmp_path / "empty")
    meta = json.loads((empty / "meta.json").read_text())
    meta["splits"]["train"].update(rows=0, shards=[])
    (empty / "meta.json").write_text(json.dumps(meta))
    fails_cleanly(
        ["train", "--config", str(config_file), "--data", str(empty)],
        tmp_path / "out",
        capsys,
        "split 'train' is empty",
    )


def test_tokenizer_that_does_not_load(dataset, config_file, tmp_path, capsys):
    broken = copy_dataset(dataset, tmp_path / "broken")
    (broken / "tokenizer.json").write_text('{"model": "not a tokenizer"')
    fails_cleanly(
        ["train", "--config", str(config_file), "--data", str(broken)],
        tmp_path / "out",
        capsys,
        "not a loadable tokenizer.json",
    )


def test_val_tokens_beyond_the_val_split(config_file, tmp_path, capsys):
    fails_cleanly(
        ["train", "--config", str(config_file), "--val-tokens", str(10**9)],
        tmp_path / "out",
        capsys,
        "lower data.val_tokens",
    )


@pytest.fixture
def interrupted_run(dataset, tmp_path, monkeypatch) -> Path:
    """A run stopped (Ctrl-C) after its last training step: checkpoint at step 4 of 5, no result."""
    cfg = tiny_config(dataset, steps=5, checkpoint_every_steps=2)
    (tmp_path / "run.yaml").write_text(dump_yaml(cfg))

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(loop, "validation_loss", interrupt)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, tmp_path / "run")
    assert latest_checkpoint(tmp_path / "run").name == "step_00000004"
    return tmp_path / "run"


def resume_argv(run: Path) -> list[str]:
    return ["train", "--config", str(run.parent / "run.yaml"), "--resume"]


def test_corrupt_checkpoint_on_resume(interrupted_run, capsys):
    weights = latest_checkpoint(interrupted_run) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    fails_cleanly(resume_argv(interrupted_run), interrupted_run, capsys, "is corrupt")


def test_corrupt_checkpoint_state_on_resume(interrupted_run, capsys):
    (latest_checkpoint(interrupted_run) / "state.json").write_text("{")
    fails_cleanly(resume_argv(interrupted_run), interrupted_run, capsys, "missing or corrupt")


def test_checkpoint_of_another_model_on_resume(interrupted_run, capsys):
    other = LoopedGPT(
        ModelConfig(width=48, head_dim=16, depth=4, prelude=1, coda=1, r=2, vocab_size=320, seq_len=32)
    )
    save_tensors(latest_checkpoint(interrupted_run) / "model.safetensors", other.state_dict())
    fails_cleanly(resume_argv(interrupted_run), interrupted_run, capsys, "do not match the model config")


def test_resume_with_a_different_config(interrupted_run, capsys):
    fails_cleanly([*resume_argv(interrupted_run), "--seed", "7"], interrupted_run, capsys, "differs in: seed")


def test_resume_with_another_width_names_the_nested_key(interrupted_run, capsys):
    fails_cleanly(
        [*resume_argv(interrupted_run), "--width", "48"], interrupted_run, capsys, "differs in: model.width"
    )


def test_existing_run_without_resume(interrupted_run, capsys):
    fails_cleanly(
        ["train", "--config", str(interrupted_run.parent / "run.yaml")],
        interrupted_run,
        capsys,
        "pass --resume",
    )


def test_interrupted_run_resumes_in_process(interrupted_run, capsys):
    metrics = interrupted_run / "metrics.jsonl"
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2, 3, 4, 5]
    with metrics.open("a") as fh:
        fh.write('{"step": 6, "loss": 1.')  # a line cut by kill -9
    assert main(resume_argv(interrupted_run) + ["--out", str(interrupted_run)]) == 0
    # step 5 came after the step-4 checkpoint: it is redone and logged once; the cut line is dropped
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2, 3, 4, 5]
    assert json.loads((interrupted_run / "result.json").read_text())["status"] == "ok"
    assert "val_loss" in capsys.readouterr().out
