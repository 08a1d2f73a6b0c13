"""Issue 12: the README's resume command verbatim (`loopscale train --out DIR --resume`, no --config), the
recorded thread count, and an interrupt that checkpoints before stopping."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_config

from loopscale.cli import main
from loopscale.config import dump_yaml
from loopscale.train import checkpoint as ckpt
from loopscale.train import train
from loopscale.train.checkpoint import latest_checkpoint

torch.set_num_threads(1)


def metrics(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def killed_run(dataset, tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(reference run, run stopped right after its step-4 checkpoint as by kill -9), same config."""
    cfg = tiny_config(dataset, steps=8, checkpoint_every_steps=2)
    (tmp_path / "run.yaml").write_text(dump_yaml(cfg))
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "ref")]) == 0
    save = ckpt.save_checkpoint

    def save_then_die(run_dir, step, *args, **kwargs):
        save(run_dir, step, *args, **kwargs)
        if step == 4:
            raise SystemExit(137)  # the process ends here, no cleanup (as after kill -9)

    with monkeypatch.context() as m:
        m.setattr(ckpt, "save_checkpoint", save_then_die)
        with pytest.raises(SystemExit):
            main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "k9")])
    assert latest_checkpoint(tmp_path / "k9").name == "step_00000004"
    assert not (tmp_path / "k9" / "result.json").exists()
    return tmp_path / "ref", tmp_path / "k9"


def test_readme_resume_command_reads_the_run_folder_config(killed_run, capsys, monkeypatch):
    ref, run = killed_run
    monkeypatch.chdir(run.parent)
    assert main(["train", "--out", "k9", "--resume"]) == 0, capsys.readouterr().err  # README, verbatim
    result, expected = (json.loads((r / "result.json").read_text()) for r in (run, ref))
    assert result["val_loss"] == expected["val_loss"] and metrics(run) == metrics(ref)


def test_the_thread_count_is_recorded_and_reused(killed_run, capsys):
    ref, run = killed_run
    stored = yaml.safe_load((run / "config.yaml").read_text())["threads"]
    assert stored == torch.get_num_threads() == 1
    torch.set_num_threads(2)  # a resume in a process whose default differs keeps the recorded count
    try:
        assert main(["train", "--out", str(run), "--resume"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)
    assert "note" not in capsys.readouterr().err
    assert (
        json.loads((run / "result.json").read_text())["val_loss"]
        == json.loads((ref / "result.json").read_text())["val_loss"]
    )


def test_an_explicit_other_thread_count_says_it_is_not_bit_identical(killed_run, capsys):
    _, run = killed_run
    try:
        assert main(["train", "--out", str(run), "--resume", "--threads", "2"]) == 0
    finally:
        torch.set_num_threads(1)
    err = capsys.readouterr().err
    assert "2 CPU thread(s) instead of the 1 this run started with" in err and "not be bit-identical" in err
    assert yaml.safe_load((run / "config.yaml").read_text())["threads"] == 2


def test_sigint_checkpoints_then_stops_and_says_how_to_resume(dataset, tmp_path, capsys, monkeypatch):
    cfg = tiny_config(dataset, steps=8)  # no periodic checkpoints
    (tmp_path / "run.yaml").write_text(dump_yaml(cfg))
    ref = tmp_path / "ref"
    assert train(cfg, ref)["status"] == "ok"
    from loopscale.train import loop

    real = loop.set_lr

    def interrupt_at_step_3(optimizers, mult, calls=[0]):  # noqa: B006 (a call counter)
        calls[0] += 1
        if calls[0] == 3:
            os.kill(os.getpid(), signal.SIGINT)  # arrives during step 3: it finishes, checkpoints, stops
        real(optimizers, mult)

    run = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(loop, "set_lr", interrupt_at_step_3)
        assert main(["train", "--config", str(tmp_path / "run.yaml"), "--out", str(run)]) == 130
    err = capsys.readouterr().err
    assert f"resume with `loopscale train --out {run} --resume`" in err
    assert latest_checkpoint(run).name == "step_00000003"
    assert main(["train", "--out", str(run), "--resume"]) == 0
    assert metrics(run) == metrics(ref)
    assert (
        json.loads((run / "result.json").read_text())["val_loss"]
        == json.loads((ref / "result.json").read_text())["val_loss"]
    )


def test_a_diverged_run_writes_strict_json(dataset, tmp_path):
    cfg = tiny_config(dataset, steps=4, optim={"recipe": "adamw", "adamw_matrix_lr": 1e30, "embed_lr": 1e30})
    result = train(cfg, tmp_path / "run")
    assert result["status"] == "failed" and "non-finite" in result["reason"]
    text = (tmp_path / "run" / "result.json").read_text()
    doc = json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name} in result.json"))
    assert doc["train_loss"] is None and doc["val_loss"] is None
