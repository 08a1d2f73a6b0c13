"""``compile: auto`` (issue 51): a run compiles when its training FLOPs take long enough at the machine's
peak for the compile to pay; the decision is written to the run's config.yaml, and a resumed run keeps the
one it started with (compiled and eager steps round differently)."""

from __future__ import annotations

import pytest
import torch
import yaml
from conftest import tiny_config

from loopscale.errors import UserError
from loopscale.train import train
from loopscale.train.perf import COMPILE_BREAK_EVEN_PEAK_S, compile_pays


@pytest.fixture
def compiles(monkeypatch) -> list:
    """torch.compile replaced by a recorder (the decision is under test, not inductor)."""
    calls = []

    def fake_compile(model, *args, **kwargs):
        calls.append(model)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    return calls


def test_compile_pays_at_the_break_even_peak_seconds():
    peak = 1e11
    assert compile_pays(COMPILE_BREAK_EVEN_PEAK_S * peak, peak)
    assert not compile_pays(0.99 * COMPILE_BREAK_EVEN_PEAK_S * peak, peak)


def test_eager_is_the_default_and_auto_leaves_a_short_run_eager(dataset, tmp_path, compiles):
    assert tiny_config(dataset, steps=2).compile is False  # the default every published spec was written in
    cfg = tiny_config(dataset, steps=2, compile="auto")
    result = train(cfg, tmp_path / "run")
    assert result["config"]["compile"] is False and not compiles
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["compile"] is False


def test_auto_compiles_a_run_long_at_the_peak_and_records_it(dataset, tmp_path, compiles):
    """The same run on a device 1e9× slower: its FLOPs take longer than the break-even there."""
    cfg = tiny_config(dataset, compile="auto", steps=2, peak_flops=10.0)
    result = train(cfg, tmp_path / "run")
    assert result["config"]["compile"] is True and len(compiles) == 1
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["compile"] is True


def test_auto_stays_eager_when_the_peak_was_probed_under_load(dataset, tmp_path, compiles, monkeypatch):
    """A busy machine's probe reads low (so every run looks long) while its compiles slow down most."""
    from loopscale.train import loop
    from loopscale.train.perf import MachineLoad, PeakFlops

    monkeypatch.setattr(loop, "peak_measurement", lambda *a: PeakFlops(10.0, MachineLoad(12.0, 2)))
    result = train(tiny_config(dataset, compile="auto", steps=2, peak_flops=None), tmp_path / "run")
    assert result["config"]["compile"] is False and not compiles
    assert result["peak_flops"] == 10.0  # the MFU still uses it


def test_auto_leaves_a_loop_count_recipe_eager(dataset, tmp_path, compiles):
    """Sampled depth runs a graph per drawn loop count: compiling each would not pay."""
    cfg = tiny_config(dataset, compile="auto", steps=2, peak_flops=10.0, depth_sampling="poisson-lognormal")
    assert train(cfg, tmp_path / "run")["config"]["compile"] is False and not compiles


def test_a_resumed_auto_run_keeps_the_recorded_decision(dataset, tmp_path, compiles):
    run = tmp_path / "run"
    train(tiny_config(dataset, compile="auto", steps=4, peak_flops=10.0, checkpoint_every_steps=2), run)
    (run / "result.json").unlink()  # as if interrupted after its last checkpoint
    # resumed where auto alone would now decide eager (a fast device): the run keeps compiling
    resumed = train(tiny_config(dataset, compile="auto", steps=4, checkpoint_every_steps=2), run, resume=True)
    assert resumed["config"]["compile"] is True and len(compiles) == 2


@pytest.mark.parametrize("value", ["yes", "always"])
def test_compile_accepts_true_false_or_auto(dataset, value):
    with pytest.raises(UserError, match="compile must be true, false or auto"):
        tiny_config(dataset, compile=value).validate()
