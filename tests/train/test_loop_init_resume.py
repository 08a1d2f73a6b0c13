"""``loop_init: random`` draws its noise from torch's global generator in every forward pass; the
generator's state is in every checkpoint, so a resumed run draws what the uninterrupted run drew."""

from __future__ import annotations

import json

import pytest
from conftest import tiny_config

from loopscale.train import loop, train
from loopscale.train.checkpoint import latest_checkpoint


def losses(run) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_resumed_random_start_run_repeats_the_uninterrupted_run(dataset, tmp_path, monkeypatch):
    cfg = tiny_config(dataset, steps=5, checkpoint_every_steps=2,
                      model={"injection": "parcae", "loop_init": "random"})
    reference = train(cfg, tmp_path / "reference")

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:  # stopped after step 5; its last checkpoint is step 4's
        m.setattr(loop, "validation_loss", interrupt)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, tmp_path / "run")
    assert latest_checkpoint(tmp_path / "run").name == "step_00000004"
    resumed = train(cfg, tmp_path / "run", resume=True)  # redoes step 5 from the step-4 generator state
    assert losses(tmp_path / "run") == losses(tmp_path / "reference")
    assert resumed["val_loss"] == reference["val_loss"]
