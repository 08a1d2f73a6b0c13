"""Parcae's injection (issue 41): u(i) = exp(−Δ⊙a)⊙h(i) + Δ⊙(B·e), a minimal swap for linear injection.

The forward pass and gradients against an independent reference are in test_gpt.py (VARIANTS); the FLOPs
against a measurement in test_flops.py. Here: the initialisation, the hand count, the matched-pair init and
the routing of the new parameters."""

from __future__ import annotations

import math

import pytest
import torch

from loopscale.accounting import count_params
from loopscale.config import ModelConfig
from loopscale.model import LoopedGPT
from loopscale.train.config import OptimConfig
from loopscale.train.optim import MuonH, build_optimizers, peak_learning_rates

torch.set_num_threads(1)

PARCAE = ("parcae", "parcae-diag")


def tiny(**kw) -> ModelConfig:
    base = dict(width=64, head_dim=32, depth=6, prelude=1, coda=1, r=4, vocab_size=97, seq_len=16)
    base.update(kw)
    return ModelConfig(**base)


@pytest.mark.parametrize("injection", PARCAE)
def test_the_injection_at_init_is_0447_h_plus_0805_e(injection):
    """A_log = 0, Δ = softplus(dt_bias) = ln(5)/2 and B = I: the state decays by √(1/5) per loop."""
    model = LoopedGPT(tiny(injection=injection))
    ones, zeros = torch.ones(1, 1, 64), torch.zeros(1, 1, 64)
    with torch.no_grad():
        torch.testing.assert_close(model.parcae_injection(zeros, ones), 0.447 * ones, rtol=0, atol=1e-3)
        torch.testing.assert_close(model.parcae_injection(ones, zeros), 0.805 * ones, rtol=0, atol=1e-3)
        e, h = torch.randn(2, 5, 64), torch.randn(2, 5, 64)
        exact = math.sqrt(1 / 5) * h + math.log(5) / 2 * e  # decay √(1/5), Δ = ln(5)/2
        torch.testing.assert_close(model.parcae_injection(e, h), exact, rtol=0, atol=1e-5)
    assert torch.equal(model.parcae_a_log, torch.zeros(64))
    expected_b = torch.eye(64) if injection == "parcae" else torch.ones(64)
    assert torch.equal(model.parcae_b, expected_b)


@pytest.mark.parametrize("r", [2, 4])
@pytest.mark.parametrize("injection", PARCAE)
def test_parameters_match_a_hand_count_and_accounting(injection, r):
    d = 64
    cfg = tiny(injection=injection, r=r)
    lay = cfg.layout()
    block = 12 * d * d + 2 * d  # q, k, v, o, MLP 4d; two norm gains
    inject = (d * d if injection == "parcae" else d) + 2 * d  # B, A_log, dt_bias
    counts = count_params(cfg)
    assert counts.n_rec == lay.rec_layers * block + inject
    assert counts.n_once == (lay.prelude + lay.coda) * block + 3 * d
    model = LoopedGPT(cfg)
    assert sum(p.numel() for p in model.parameters()) == counts.n + counts.n_embed
    assert sum(p.numel() for p in model.param_groups()["injection"]) == inject


@pytest.mark.parametrize("injection", PARCAE)
def test_shared_parameters_are_the_linear_models_bit_for_bit(injection):
    """A Parcae run and its linear-injection base at the same seed are a matched pair: every parameter they
    share starts identical (the new parameters draw nothing, and linear's W_inj draw is replayed)."""
    torch.manual_seed(3)
    base = LoopedGPT(tiny(injection="linear")).state_dict()
    torch.manual_seed(3)
    variant = LoopedGPT(tiny(injection=injection)).state_dict()
    shared = set(base) & set(variant)
    assert set(base) - shared == {"inject.weight"}
    assert set(variant) - shared == {"parcae_a_log", "parcae_dt_bias", "parcae_b"}
    assert all(torch.equal(base[k], variant[k]) for k in shared)
    assert torch.get_rng_state().equal(_rng_after_linear_model(3))  # and the stream continues alike


def _rng_after_linear_model(seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    LoopedGPT(tiny(injection="linear"))
    return torch.get_rng_state()


@pytest.mark.parametrize("injection", PARCAE)
def test_injection_parameters_go_to_adamw_without_weight_decay(injection):
    model = LoopedGPT(tiny(injection=injection))
    optim = OptimConfig(weight_decay=0.1)
    lrs = peak_learning_rates(optim, model.cfg, 1024, 1e6)
    assert lrs["injection"] == pytest.approx(optim.injection_lr * (64 / optim.ref_width) ** -0.5)
    muon, adam = build_optimizers(model, optim, lrs, "cpu")
    assert isinstance(muon, MuonH)
    on_muon = {id(p) for p in muon.param_groups[0]["params"]}
    assert not on_muon & {id(p) for p in model.param_groups()["injection"]}  # B is not a MuonH matrix
    (group,) = [g for g in adam.param_groups if g["name"] == "injection"]
    assert [id(p) for p in group["params"]] == [id(model.parcae_a_log), id(model.parcae_dt_bias),
                                                id(model.parcae_b)]
    assert group["weight_decay"] == 0.0 and group["lr"] == lrs["injection"]
    assert {g["name"]: g["weight_decay"] for g in adam.param_groups}["embed"] == 0.1  # the others decay
    # the shared parameters are routed as in the linear model
    linear = LoopedGPT(tiny(injection="linear")).param_groups()
    groups = model.param_groups()
    assert [len(groups[k]) for k in ("embed", "unembed", "norm", "hc")] == [
        len(linear[k]) for k in ("embed", "unembed", "norm", "hc")]
    assert len(groups["matrix"]) == len(linear["matrix"]) - 1  # all but W_inj


def test_bf16_autocast_keeps_the_activations_in_bf16():
    model = LoopedGPT(tiny(injection="parcae"))
    e, h = torch.randn(1, 4, 64), torch.randn(1, 4, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.parcae_injection(e.bfloat16(), h.bfloat16()).dtype == torch.bfloat16
        loss = model(torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16)))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.param_groups()["injection"])


def test_any_loop_count_runs():
    """The injection has no per-loop parameters: evaluation at r_eval ≠ r_train works."""
    model = LoopedGPT(tiny(injection="parcae", r=2)).double()
    idx = torch.randint(0, 97, (1, 8))
    assert model(idx, r=7).shape == (1, 8, 97)
