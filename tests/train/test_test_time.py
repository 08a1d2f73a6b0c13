"""Test-time loop counts of a finished run (``eval.test_time``) and of a priced arm (``analysis.test_time``):
the evaluation at the trained r reproduces the published val loss, the other counts are the model's loss
at those counts, results are kept per run, and weights that are not there get one line naming the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from loopscale.analysis import test_time as arm_test_time
from loopscale.analysis.test_time import DepthEvalSettings, eval_depth
from loopscale.data.dataset import PackedDataset
from loopscale.errors import UserError
from loopscale.eval.test_time import evaluate_run
from loopscale.pairs.results import TestTimeDepth, TestTimeRun
from loopscale.pairs.test_time import TEST_TIME_FILE
from loopscale.train import train
from loopscale.train.loop import load_checkpoint_model
from tests.train.conftest import tiny_config

R4 = {"r": 4, "depth": 6}


@pytest.fixture(scope="module")
def finished(dataset, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("test-time") / "run"
    train(tiny_config(dataset, model=R4, threads=1), run)
    return run


def test_a_run_is_evaluated_at_1_r_half_r_and_2r_and_reproduces_its_val_loss(finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    out = evaluate_run(run)
    published = json.loads((run / "result.json").read_text())["val_loss"]
    assert out.test_r == (1, 2, 4, 8) and out.train_r == 4 and out.weights == "run"
    assert out.at(4) == published and out.reproduction_gap == 0.0  # same tokens, micro-batch, threads
    model, _ = load_checkpoint_model(run)
    ds = PackedDataset(json.loads((run / "result.json").read_text())["config"]["data"]["path"])
    val = torch.from_numpy(ds.rows("val", 0, 16))
    for loops in (1, 8):  # an independent computation of the loss at another count
        with torch.no_grad():
            logits = model(val[:, :-1], r=loops)
        expected = F.cross_entropy(logits.flatten(0, 1).double(), val[:, 1:].flatten()).item()
        assert out.at(loops) == pytest.approx(expected, rel=1e-6)
    assert TestTimeRun.from_dict(json.loads((run / TEST_TIME_FILE).read_text())) == out
    (run / "model.safetensors").unlink()
    assert evaluate_run(run) == out  # kept: a rerun reads it, no weights needed


def test_a_run_without_weights_names_the_retraining_and_a_retrained_copy_is_used(finished, tmp_path):
    run, retrained = tmp_path / "published" / "run", tmp_path / "retrained"
    shutil.copytree(finished, run)
    (run / "model.safetensors").unlink()
    with pytest.raises(UserError, match=r"no weights to evaluate .* loopscale train --config .*--threads 1"):
        evaluate_run(run)
    assert not (run / TEST_TIME_FILE).exists()  # nothing half-written
    shutil.copytree(finished, retrained / "run")
    out = evaluate_run(run, weights_from=retrained)
    assert out.weights == "retrained" and out.retrained_val_loss == out.published_val_loss == out.at(4)


def _arm(tmp_path: Path, finished: Path, monkeypatch) -> tuple[Path, Path]:
    """A price folder of one pair: the recipe's run with weights, the base's without (as published)."""
    arm, base = tmp_path / "arm", tmp_path / "base"
    shutil.copytree(finished, arm / "runs" / "pair0")
    shutil.copytree(finished, base / "runs" / "main")
    (base / "runs" / "main" / "model.safetensors").unlink()
    (arm / "price.json").write_text("{}")
    row = SimpleNamespace(budget=1.0, width=32.0, r=4.0, seed=0.0)  # as a results table holds them
    result = SimpleNamespace(recipe="sampled-depth", base="../base", effects=SimpleNamespace(pairs=[row]))
    monkeypatch.setattr("loopscale.analysis.price.read_price", lambda path: result)
    monkeypatch.setattr(
        arm_test_time, "_runs_by_cell", lambda folder: {(1.0, 32, 4, 0): next((folder / "runs").iterdir())}
    )
    monkeypatch.setattr("loopscale.report.price.write_price_report", lambda *args: None)
    return arm, base


def test_an_arm_without_base_weights_is_one_line_and_retrain_trains_them(finished, tmp_path, monkeypatch):
    arm, base = _arm(tmp_path, finished, monkeypatch)
    with pytest.raises(UserError, match=r"1 base run\(s\) .* have no weights .*--retrain"):
        eval_depth(DepthEvalSettings(arm), echo=lambda line: None)
    assert (arm / "runs" / "pair0" / TEST_TIME_FILE).is_file()  # the recipe's runs were evaluated first
    assert not (arm / TEST_TIME_FILE).exists()
    depth = eval_depth(DepthEvalSettings(arm, tmp_path / "weights", retrain=True), echo=lambda line: None)
    pair = depth.pairs[0]
    assert pair.base.weights == "retrained" and pair.base.reproduction_gap == 0.0  # same machine, threads
    assert pair.variant.val_loss == pair.base.val_loss  # the same run twice: no effect at any count
    assert all(g.difference == 0.0 for g in depth.gains)
    assert TestTimeDepth.from_dict(json.loads((arm / TEST_TIME_FILE).read_text())) == depth


def test_retrain_needs_a_folder_to_retrain_into():
    with pytest.raises(UserError, match="--retrain needs --weights-from"):
        DepthEvalSettings(Path("arm"), retrain=True).validate()


def test_an_interrupted_eval_depth_names_a_resume_that_keeps_what_it_finished(tmp_path, monkeypatch, capsys):
    from loopscale.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(arm_test_time, "eval_depth", interrupted)
    assert main(["eval-depth", str(tmp_path), "--force"]) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"loopscale eval-depth: interrupted; resume with `loopscale eval-depth {tmp_path}`"


def test_a_damaged_test_time_json_is_one_line_naming_the_file(finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / TEST_TIME_FILE).write_text('{"schema": 1}')
    with pytest.raises(UserError, match=r"test_time.json: not a test_time.json loopscale reads .*delete it"):
        evaluate_run(run)
