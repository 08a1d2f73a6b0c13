"""examples/trainers/hf_trainer.py gives every parameter the rate of the group loopscale's own model puts
it in (``LoopedGPT.param_groups``), so that ``price --trainer`` pairs compare AdamW with loopscale's groups
and rates. A W_inj trained at Parcae's "injection" rate (5× the AdamW matrix rate at the laptop widths) had
cost the HF trainer's looped laptop runs 0.018-0.063 nats (docs/results.md, the trainer check)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from loopscale.config import ModelConfig
from loopscale.model import LoopedGPT

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trainers" / "hf_trainer.py"
RATES = {"embed": 0.1, "unembed": 0.2, "norm": 0.3, "hc": 0.4, "injection": 0.5}
MATRIX = 0.6


def _example():
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("hf_trainer_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("injection", ["linear", "hyperconnect"])
def test_each_parameter_gets_the_rate_of_loopscales_group(injection):
    example = _example()
    cfg = ModelConfig(width=32, r=3, depth=5, prelude=1, coda=1, head_dim=16, vocab_size=64, seq_len=16,
                      injection=injection)  # fmt: skip
    opt, _ = example.optimizer(example.build_model(cfg), RATES, MATRIX, steps=10)
    numel_by_rate: dict[float, int] = {}
    for group in opt.param_groups:
        numel_by_rate[group["initial_lr"]] = sum(p.numel() for p in group["params"])
    ours = {name: sum(p.numel() for p in ps) for name, ps in LoopedGPT(cfg).param_groups().items() if ps}
    expected = {(MATRIX if name == "matrix" else RATES[name]): n for name, n in ours.items()}
    assert numel_by_rate == expected
