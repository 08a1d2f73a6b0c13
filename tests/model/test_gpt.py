"""LoopedGPT against method §2: an independent float64 reference forward, init, groups, BPTT, cache."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.accounting import count_params
from loopscale.config import ModelConfig
from loopscale.errors import UserError
from loopscale.model import LoopedGPT

torch.set_num_threads(1)

VOCAB = 97  # padded to 128: exercises the vocab slice


def tiny(**kw) -> ModelConfig:
    base = dict(width=64, head_dim=32, depth=6, prelude=1, coda=1, vocab_size=VOCAB, seq_len=24)
    base.update(kw)
    return ModelConfig(**base)


def perturbed(cfg: ModelConfig, seed: int = 0) -> LoopedGPT:
    """A float64 model whose every parameter is moved off its (symmetric) initial value."""
    torch.manual_seed(seed)
    model = LoopedGPT(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p) * (p.std() if p.numel() > 1 and p.std() > 0 else 1.0))
    return model


VARIANTS = [
    dict(r=1, injection="auto", depth=4),
    dict(r=2, injection="linear"),
    dict(r=4, injection="linear"),
    dict(r=2, injection="additive"),
    dict(r=4, injection="none"),
    dict(r=2, injection="hyperconnect", hc_lanes=2),
    dict(r=4, injection="hyperconnect", hc_lanes=3),
    dict(r=4, injection="linear", bptt_k=1),
    dict(r=4, injection="additive", bptt_k=2),
    dict(r=2, injection="parcae"),
    dict(r=4, injection="parcae-diag"),
    dict(r=4, injection="parcae", bptt_k=2),
]


# ---------------------------------------------------------------------------------------------------------
# Independent reference: method §2 written with explicit tensor algebra (no F.rms_norm, no SDPA).


def ref_rms(x, gain, eps):
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if gain is None else y * gain


def ref_block(blk, x, cfg):
    b, t, d = x.shape
    nh, hd = cfg.n_head, cfg.head_dim
    a = ref_rms(x, blk.norm_attn.weight, cfg.norm_eps)
    q, k, v = (a @ w.weight.T for w in (blk.attn.c_q, blk.attn.c_k, blk.attn.c_v))
    q, k, v = (z.view(b, t, nh, hd).transpose(1, 2) for z in (q, k, v))
    half = hd // 2
    freqs = cfg.rope_theta ** (-torch.arange(half, dtype=x.dtype) / half)
    ang = torch.arange(t, dtype=x.dtype)[:, None] * freqs[None, :]
    cos, sin = ang.cos(), ang.sin()

    def rope(z):
        z1, z2 = z[..., :half], z[..., half:]
        return torch.cat([z1 * cos + z2 * sin, -z1 * sin + z2 * cos], -1)

    q, k = ref_rms(rope(q), None, cfg.norm_eps), ref_rms(rope(k), None, cfg.norm_eps)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
    x = x + y @ blk.attn.c_proj.weight.T
    m = ref_rms(x, blk.norm_mlp.weight, cfg.norm_eps)
    return x + (torch.clamp(m @ blk.mlp.c_fc.weight.T, min=0) ** 2) @ blk.mlp.c_proj.weight.T


def ref_logits(model, idx, r):
    cfg, lay = model.cfg, model.layout
    eps = cfg.norm_eps

    def stack(blocks, x):
        for blk in blocks:
            x = ref_block(blk, x, cfg)
        return x

    e = stack(model.prelude, ref_rms(model.wte.weight[idx], model.norm_emb.weight, eps))
    detach_below = r - cfg.bptt_k if cfg.bptt_k else 0
    if lay.injection == "hyperconnect":
        n = cfg.hc_lanes
        lanes = [e] * n
        for i in range(r):
            u = sum(model.hc_alpha[i, j] * lanes[j] for j in range(n))
            s = ref_rms(stack(model.recur, u), model.norm_recur.weight, eps)
            lanes = [sum(model.hc_mix[i, a, j] * lanes[j] for j in range(n)) + model.hc_beta[i, a] * s
                     for a in range(n)]
        h = sum(lanes)
    else:
        h = torch.zeros_like(e) if lay.injection == "additive" else e
        for i in range(r):
            if lay.injection == "linear":
                w = model.inject.weight
                u = e @ w[:, : cfg.width].T + h @ w[:, cfg.width:].T
            elif lay.injection.startswith("parcae"):
                delta = torch.log1p(torch.exp(model.parcae_dt_bias))  # softplus
                b = model.parcae_b
                u = torch.exp(-delta * torch.exp(model.parcae_a_log)) * h + delta * (e @ b.T if b.ndim == 2
                                                                                      else e * b)
            else:
                u = h + e if lay.injection == "additive" else h
            h = ref_rms(stack(model.recur, u), model.norm_recur.weight, eps)
            if i < detach_below:
                h = h.detach()
    z = ref_rms(stack(model.coda, h), model.norm_final.weight, eps) @ model.lm_head.weight[:VOCAB].T
    return 15.0 * torch.tanh(z / 15.0)


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_forward_and_gradients_match_reference(kw):
    model = perturbed(tiny(**kw))
    idx = torch.randint(0, VOCAB, (2, 24))
    targets = torch.randint(0, VOCAB, (2, 24))
    logits = model(idx)
    assert logits.shape == (2, 24, VOCAB) and logits.dtype == torch.float64
    ref = ref_logits(model, idx, model.layout.r)
    torch.testing.assert_close(logits, ref, rtol=1e-9, atol=1e-9)

    ref_loss = F.cross_entropy(ref.flatten(0, 1), targets.flatten())
    ref_grads = torch.autograd.grad(ref_loss, list(model.parameters()), allow_unused=True)
    model(idx, targets).backward()
    for (name, p), g in zip(model.named_parameters(), ref_grads):
        expected = torch.zeros_like(p) if g is None else g
        got = torch.zeros_like(p) if p.grad is None else p.grad
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-8, msg=name)


def test_r_eval_override_matches_reference_and_hc_refuses_more_loops():
    model = perturbed(tiny(r=2, injection="linear"))
    idx = torch.randint(0, VOCAB, (1, 16))
    torch.testing.assert_close(model(idx, r=5), ref_logits(model, idx, 5), rtol=1e-9, atol=1e-9)
    hc = perturbed(tiny(r=4, injection="hyperconnect"))
    torch.testing.assert_close(hc(idx, r=3), ref_logits(hc, idx, 3), rtol=1e-9, atol=1e-9)
    with pytest.raises(UserError, match="hyperconnection"):
        hc(idx, r=5)
    with pytest.raises(UserError, match="r must be >= 1"):
        model(idx, r=0)


# ---------------------------------------------------------------------------------------------------------
# Layout, parameter count, groups and initialisation (method §2.1, §2.8, §3.1).


def test_paper_vocabulary_slices_logits_to_32001():
    from loopscale.paper import PADDED_VOCAB
    from loopscale.paper import VOCAB as PAPER_VOCAB

    cfg = tiny(vocab_size=PAPER_VOCAB, seq_len=8)
    torch.manual_seed(0)
    model = LoopedGPT(cfg)
    assert PAPER_VOCAB == 32_001 and cfg.padded_vocab == PADDED_VOCAB == 32_064
    assert model.wte.weight.shape[0] == model.lm_head.weight.shape[0] == 32_064
    assert count_params(cfg).n_embed == 2 * 32_064 * cfg.width  # accounting uses the padded size
    idx = torch.randint(0, PAPER_VOCAB, (2, 8))
    assert model(idx).shape == (2, 8, 32_001)
    loss = model(idx, idx)
    with torch.no_grad():
        model.lm_head.weight[PAPER_VOCAB:] = 100.0  # the 63 padding rows never enter the softmax
    assert torch.equal(model(idx, idx), loss)


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_parameter_count_and_groups(kw):
    cfg = tiny(**kw)
    model = LoopedGPT(cfg)
    groups = model.param_groups()
    ids = [id(p) for g in groups.values() for p in g]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))  # a partition
    assert all(p.ndim == 2 for p in groups["matrix"]) and all(p.ndim == 1 for p in groups["norm"])
    counts = count_params(cfg)
    non_embedding = sum(p.numel() for key in ("matrix", "norm", "hc", "injection") for p in groups[key])
    assert non_embedding == counts.n
    assert sum(p.numel() for key in ("embed", "unembed") for p in groups[key]) == counts.n_embed
    lay = cfg.layout()
    assert len(groups["norm"]) == 2 * lay.unique_layers + 3
    assert len(groups["matrix"]) == 6 * lay.unique_layers + (lay.injection == "linear")
    assert (len(groups["hc"]) > 0) == (lay.injection == "hyperconnect")
    assert (len(groups["injection"]) > 0) == lay.injection.startswith("parcae")
    assert model.wte.weight.shape == model.lm_head.weight.shape == (cfg.padded_vocab, cfg.width)
    assert not any("rope" in k for k in model.state_dict())  # RoPE tables are non-persistent buffers


def test_plain_r1_layout_has_no_prelude_coda_or_injection():
    model = LoopedGPT(tiny(r=1, injection="auto", depth=4))
    assert (len(model.prelude), len(model.recur), len(model.coda)) == (0, 4, 0)
    assert model.inject is None and model.param_groups()["hc"] == []


def test_paper_initialisation():
    torch.manual_seed(0)
    cfg = tiny(width=256, head_dim=64, r=2, injection="linear", depth=4, vocab_size=4000)
    model = LoopedGPT(cfg)
    d = cfg.width
    assert abs(model.wte.weight.std().item() - 1.0) < 0.01
    assert abs(model.lm_head.weight.std().item() - 0.001) < 0.00002
    for blk in model.blocks():
        for lin, fan_in in [(blk.attn.c_q, d), (blk.attn.c_k, d), (blk.attn.c_v, d), (blk.attn.c_proj, d),
                            (blk.mlp.c_fc, d), (blk.mlp.c_proj, 4 * d)]:
            w, bound = lin.weight, math.sqrt(3 / fan_in)
            assert w.abs().max().item() <= bound
            assert abs(w.std().item() * math.sqrt(fan_in) - 1.0) < 0.02  # U(−a, a) has std 1/√fan_in
    for norm in model.param_groups()["norm"]:
        assert torch.equal(norm, torch.ones(d))
    expected = torch.cat([torch.eye(d), torch.zeros(d, d)], dim=1)
    assert torch.equal(model.inject.weight, expected)


def test_hyperconnection_cyclic_init():
    model = LoopedGPT(tiny(r=4, injection="hyperconnect", hc_lanes=3))
    assert torch.equal(model.hc_alpha, torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]]))
    assert torch.equal(model.hc_mix, torch.eye(3).expand(4, 3, 3))
    assert torch.equal(model.hc_beta, torch.ones(4, 3))


def test_linear_injection_at_init_ignores_the_state():
    """W_inj = [I | 0] makes u(i) = e for every i, so at init the output does not depend on r."""
    model = LoopedGPT(tiny(r=2, injection="linear")).double()
    idx = torch.randint(0, VOCAB, (2, 12))
    torch.testing.assert_close(model(idx, r=1), model(idx, r=4), rtol=0, atol=1e-12)


def test_hyperconnection_init_lanes_accumulate_loop_outputs():
    """At the cyclic init every lane is e + Σ_{j<i} s(j) (method §2.5 [derived]): check against an additive
    recurrence written out by hand with the model's own blocks."""
    model = LoopedGPT(tiny(r=3, depth=5, injection="hyperconnect", hc_lanes=2)).double()
    idx = torch.randint(0, VOCAB, (1, 10))
    cos, sin = model.rope_cos[:10], model.rope_sin[:10]

    def stack(blocks, x):
        for blk in blocks:
            x = blk(x, cos, sin, None)
        return x

    e = stack(model.prelude, model.norm_emb(model.wte(idx)))
    lane = e
    for _ in range(3):
        lane = lane + model.norm_recur(stack(model.recur, lane))
    expected = model._logits(model.norm_final(stack(model.coda, 2 * lane)))
    torch.testing.assert_close(model(idx), expected, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------------------------
# Loss, causality, truncated BPTT.


def test_loss_reductions_and_ignore_index():
    model = perturbed(tiny(r=2, injection="linear"))
    idx = torch.randint(0, VOCAB, (3, 20))
    targets = torch.randint(0, VOCAB, (3, 20))
    targets[0, :5] = -1
    targets[2, -3:] = -1
    logits = model(idx)
    logp = logits.log_softmax(-1)
    keep = targets != -1
    nll = -logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0] * keep
    per_token = model(idx, targets, reduction="none")
    assert per_token.shape == targets.shape
    torch.testing.assert_close(per_token, nll, rtol=1e-10, atol=1e-12)
    assert torch.all(per_token[~keep] == 0)
    torch.testing.assert_close(model(idx, targets), nll.sum() / keep.sum(), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError):
        model(idx, targets, reduction="sum")


def test_logits_are_softcapped_fp32_even_from_a_bf16_model():
    model = LoopedGPT(tiny(r=2, injection="linear"))
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 10.0)  # large logits
    logits = model.to(torch.bfloat16)(torch.randint(0, VOCAB, (1, 8)))
    assert logits.dtype == torch.float32
    assert logits.abs().max().item() <= 15.0 and logits.abs().max().item() > 10.0


@settings(max_examples=12, deadline=None)
@given(cut=st.integers(1, 15), seed=st.integers(0, 2**16),
       injection=st.sampled_from(["linear", "hyperconnect"]))
def test_causality(cut, seed, injection):
    """Logits at positions < cut do not depend on tokens at positions >= cut, in every loop."""
    torch.manual_seed(seed)
    model = LoopedGPT(tiny(r=2, injection=injection)).double()
    a = torch.randint(0, VOCAB, (1, 16))
    b = a.clone()
    b[0, cut:] = torch.randint(0, VOCAB, (16 - cut,))
    torch.testing.assert_close(model(a)[:, :cut], model(b)[:, :cut], rtol=0, atol=1e-12)


def test_truncated_bptt_keeps_the_forward_and_cuts_the_gradient():
    idx = torch.randint(0, VOCAB, (2, 16))
    full, trunc = perturbed(tiny(r=4, injection="linear")), perturbed(tiny(r=4, injection="linear", bptt_k=1))
    trunc.load_state_dict(full.state_dict())
    loss_full, loss_trunc = full(idx, idx), trunc(idx, idx)
    assert loss_full.item() == loss_trunc.item()
    loss_full.backward()
    loss_trunc.backward()
    # Prelude still learns through the last injection; the recurrent block's gradient changes.
    assert trunc.prelude[0].attn.c_q.weight.grad.abs().sum() > 0
    assert not torch.allclose(full.recur[0].mlp.c_fc.weight.grad, trunc.recur[0].mlp.c_fc.weight.grad)
    # Passthrough: nothing reaches e once the first state is detached, so the prelude gets no gradient.
    none = perturbed(tiny(r=4, injection="none", bptt_k=2))
    none(idx, idx).backward()
    assert none.prelude[0].attn.c_q.weight.grad is None and none.wte.weight.grad is None


def test_sequence_longer_than_seq_len_is_refused():
    model = LoopedGPT(tiny())
    with pytest.raises(UserError, match="exceeds"):
        model(torch.zeros(1, 25, dtype=torch.long))


# ---------------------------------------------------------------------------------------------------------
# Greedy generation with one KV-cache slot per loop iteration (method §2.9).


@pytest.mark.parametrize("kw,r_eval", [
    (dict(r=1, injection="auto", depth=4), None),
    (dict(r=4, injection="linear"), None),
    (dict(r=2, injection="linear"), 3),
    (dict(r=2, injection="additive"), None),
    (dict(r=4, injection="none"), None),
    (dict(r=4, injection="hyperconnect"), 2),
])
def test_cached_generation_equals_recomputing_the_full_forward(kw, r_eval):
    model = perturbed(tiny(**kw), seed=1)
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 1.0)  # clear argmax margins
    prompt = torch.randint(0, VOCAB, (2, 5))
    out = model.generate(prompt, 12, r=r_eval)
    assert out.shape == (2, 17) and torch.equal(out[:, :5], prompt)
    seq = prompt
    with torch.no_grad():
        for _ in range(12):
            seq = torch.cat([seq, model(seq, r=r_eval)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


def test_cache_slots_per_loop_give_the_full_forward_logits():
    """Stronger than argmax: the cached step's logits equal the full forward's last-position logits."""
    model = perturbed(tiny(r=4, injection="linear"), seed=2)
    seq = torch.randint(0, VOCAB, (1, 9))
    lay = model.layout
    from loopscale.model.gpt import KVSlot

    cache = [KVSlot() for _ in range(lay.prelude + lay.r * lay.rec_layers + lay.coda)]
    with torch.no_grad():
        model._hidden(seq[:, :8], lay.r, cache, 0)
        step = model._logits(model._hidden(seq[:, 8:], lay.r, cache, 8))[:, -1]
        torch.testing.assert_close(step, model(seq)[:, -1], rtol=1e-10, atol=1e-12)


def test_generate_refuses_bad_lengths():
    model = LoopedGPT(tiny())
    prompt = torch.zeros(1, 20, dtype=torch.long)
    with pytest.raises(UserError, match="seq_len"):
        model.generate(prompt, 5)
    with pytest.raises(UserError, match="max_new_tokens"):
        model.generate(prompt, -1)
    assert torch.equal(model.generate(prompt, 0), prompt)
    with pytest.raises(UserError, match="at least one token"):
        model.generate(torch.zeros(1, 0, dtype=torch.long), 3)


def test_bf16_autocast_forward_backward():
    """The training loop wraps the fp32 module in bf16 autocast: logits stay fp32 and close to fp32's."""
    torch.manual_seed(0)
    model = LoopedGPT(tiny(r=2, injection="linear"))
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 0.05)
    idx = torch.randint(0, VOCAB, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(idx)
        loss = model(idx, idx)
    loss.backward()
    assert logits.dtype == torch.float32 and loss.dtype == torch.float32
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.param_groups()["matrix"])
    torch.testing.assert_close(logits, model(idx), rtol=0.05, atol=0.05)
