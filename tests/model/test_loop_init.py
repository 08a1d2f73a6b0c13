"""Parcae's initial state (issue 51): ``model.loop_init`` picks h(0), the state the first loop starts from:
e (auto, input: every published run), 0 (zero) or Parcae's noise (random). The variants must differ in
h(0) alone: same parameters at the same seed, same parameter count and FLOPs, and the same computation from
the first loop on. The default's forward against an independent reference is in test_gpt.py (VARIANTS)."""

from __future__ import annotations

import math

import pytest
import torch

from loopscale.accounting import count_params, flops_per_token
from loopscale.config import LOOP_INITS, ModelConfig, dump_yaml, from_dict, to_dict
from loopscale.errors import UserError
from loopscale.model import LoopedGPT
from loopscale.recipes import resolve_recipe

torch.set_num_threads(1)

D = 64


def tiny(**kw) -> ModelConfig:
    base = dict(width=D, head_dim=32, depth=6, prelude=1, coda=1, r=4, vocab_size=97, seq_len=16,
                injection="parcae")
    base.update(kw)
    return ModelConfig(**base)


def traced_forward(model: LoopedGPT, idx: torch.Tensor) -> tuple[torch.Tensor, list[tuple]]:
    """Logits and the (e, h) pair every loop's injection received."""
    calls = []
    inject = model.parcae_injection

    def recording(e, h):
        calls.append((e.clone(), h.clone()))
        return inject(e, h)

    model.parcae_injection = recording
    try:
        return model(idx), calls
    finally:
        del model.parcae_injection


@pytest.fixture(scope="module")
def runs():
    """Every loop_init at seed 3 on the same tokens, each forward after the same generator state."""
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    out = {}
    for init in LOOP_INITS:
        torch.manual_seed(3)
        model = LoopedGPT(tiny(loop_init=init)).double()
        torch.manual_seed(11)
        with torch.no_grad():
            logits, calls = traced_forward(model, idx)
        out[init] = (model, logits, calls)
    return idx, out


def test_the_variants_start_from_the_same_parameters(runs):
    _, out = runs
    reference = out["auto"][0].state_dict()
    for model, _, _ in out.values():
        state = model.state_dict()
        assert state.keys() == reference.keys()
        assert all(torch.equal(state[k], reference[k]) for k in reference)


def test_the_first_loop_starts_from_e_zero_or_parcaes_noise(runs):
    _, out = runs
    e = out["auto"][2][0][0]
    for init, (_, _, calls) in out.items():
        assert len(calls) == 4
        assert all(torch.equal(call_e, e) for call_e, _ in calls)  # the same prelude output in every loop
        h0 = calls[0][1]
        if init in ("auto", "input"):
            assert torch.equal(h0, e)
        elif init == "zero":
            assert torch.equal(h0, torch.zeros_like(e))
        else:
            std = math.sqrt(2 / (5 * D))  # Parcae's released configs: std √(2/(5d)), truncated at ±3 std
            assert h0.abs().max() <= 3 * std
            assert h0.std().item() == pytest.approx(std * 0.986, rel=0.05)  # a ±3σ truncation: 0.986 σ
            assert abs(torch.corrcoef(torch.stack([h0.flatten(), e.flatten()]))[0, 1]) < 0.1
    assert not torch.equal(out["zero"][1], out["auto"][1])
    assert not torch.equal(out["random"][1], out["auto"][1])


def test_given_the_same_first_state_every_variant_computes_the_same(runs):
    """By construction: today's model started from another variant's h(0) gives that variant's logits."""
    idx, out = runs
    for init, (_, logits, calls) in out.items():
        model = out["auto"][0]
        h0 = calls[0][1]
        model.initial_state = lambda e, h0=h0: h0
        try:
            with torch.no_grad():
                again = model(idx)
        finally:
            del model.initial_state
        assert torch.equal(again, logits), init


def test_the_default_is_todays_parcae_bit_for_bit(runs):
    """auto (every config written before loop_init existed) is h(0) = e: input gives the same logits."""
    _, out = runs
    assert torch.equal(out["auto"][1], out["input"][1])


def test_same_parameter_count_and_flops():
    counts = {init: count_params(tiny(loop_init=init)) for init in LOOP_INITS}
    flops = {init: flops_per_token(tiny(loop_init=init)) for init in LOOP_INITS}
    assert len(set(counts.values())) == 1 and len(set(flops.values())) == 1
    sizes = {sum(p.numel() for p in LoopedGPT(tiny(loop_init=init)).parameters()) for init in LOOP_INITS}
    assert len(sizes) == 1


def test_the_noise_is_drawn_from_torchs_generator_in_every_forward():
    """Seeded alike, two forwards agree (what a resumed run relies on: the generator is checkpointed);
    one after the other they draw different noise."""
    model = LoopedGPT(tiny(loop_init="random"))
    idx = torch.randint(0, 97, (1, 16))
    with torch.no_grad():
        torch.manual_seed(5)
        first, second = model(idx), model(idx)
        torch.manual_seed(5)
        assert torch.equal(model(idx), first)
    assert not torch.equal(first, second)


def test_gradients_reach_every_parameter_from_every_start():
    for init in ("zero", "random"):
        model = LoopedGPT(tiny(loop_init=init))
        model(torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16))).backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_configs_without_the_field_dump_unchanged():
    """Sweep reuse compares run.yaml as text: a config at the default writes no loop_init key, so every
    published run.yaml is what this version writes for the same run."""
    assert "loop_init" not in dump_yaml(tiny())
    assert "loop_init" not in to_dict(ModelConfig())
    zero = tiny(loop_init="zero")
    assert to_dict(zero)["loop_init"] == "zero"
    assert from_dict(ModelConfig, to_dict(zero)) == zero


@pytest.mark.parametrize("kw, message", [
    (dict(loop_init="noise"), "loop_init must be one of"),
    (dict(injection="linear", loop_init="zero"), "applies to Parcae's injection only"),
    (dict(injection="auto", r=1, loop_init="random"), "applies to Parcae's injection only"),
])
def test_bad_loop_init_is_one_line(kw, message):
    with pytest.raises(UserError, match=message):
        tiny(**kw).validate()


def test_the_recipes_differ_from_parcae_in_loop_init_only():
    parcae = resolve_recipe("parcae").changes()["model"]
    for name, init in (("parcae-zero", "zero"), ("parcae-random", "random")):
        changes = resolve_recipe(name).changes()
        model = changes["model"]
        assert set(changes) == {"model"} and model == {**parcae, "loop_init": init}
        tiny(**model).validate()
