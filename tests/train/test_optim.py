"""MuonH, Polar Express, AdamW groups, LR transfer (method §7.3, V4) and the schedule (§7.4)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.accounting import flops_per_token, steps_for_budget
from loopscale.config import ModelConfig, from_dict
from loopscale.errors import UserError
from loopscale.model import LoopedGPT
from loopscale.paper import BATCH_TOKENS, VOCAB
from loopscale.train import OptimConfig
from loopscale.train.config import TrainConfig
from loopscale.train.optim import (
    POLAR_EXPRESS_COEFFS,
    MuonH,
    build_optimizers,
    lr_data_tokens,
    lr_multiplier,
    muonh_lr,
    peak_learning_rates,
    polar_express,
    reference_model,
    reference_tokens,
    set_lr,
    width_factor,
)

torch.set_num_threads(1)


def paper_model(s: int, r: int, **changes) -> ModelConfig:
    return ModelConfig(width=64 * s, r=r, vocab_size=VOCAB, seq_len=2048, **changes)


def with_singular_values(m: int, n: int, low: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(m, m, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    k = min(m, n)
    s = torch.linspace(1.0, low, k, dtype=torch.float64) * 3.7
    return u[:, :k] @ torch.diag(s) @ v[:, :k].T


@settings(max_examples=25, deadline=None)
@given(m=st.integers(2, 48), n=st.integers(2, 48), seed=st.integers(0, 10_000))
def test_polar_express_approximates_the_polar_factor(m, n, seed):
    g = with_singular_values(m, n, 0.1, seed)
    out = polar_express(g)
    sv = torch.linalg.svdvals(out)
    assert sv.min() > 0.7 and sv.max() < 1.15  # every singular value pushed towards 1
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    exact = u @ vh
    cosine = (out * exact).sum() / (out.norm() * exact.norm())
    assert cosine > 0.99
    torch.testing.assert_close(polar_express(g.T), out.T)  # tall and wide inputs agree


def test_polar_express_is_batched_and_scale_invariant():
    gs = torch.stack([with_singular_values(12, 20, 0.2, s) for s in range(3)])
    batched = polar_express(gs)
    for i in range(3):
        torch.testing.assert_close(batched[i], polar_express(gs[i]))
        torch.testing.assert_close(polar_express(250.0 * gs[i]), batched[i], rtol=1e-4, atol=1e-5)


def expected_muonh(w: torch.Tensor, radius: float, update: torch.Tensor, lr: float) -> torch.Tensor:
    o = polar_express(update)
    moved = w - lr * radius * o / o.norm()
    return radius * moved / moved.norm()


def test_muonh_two_steps_match_the_recipe_per_matrix():
    torch.manual_seed(0)
    shapes = [(8, 16), (16, 8), (8, 16)]  # two of equal shape are stacked inside the optimiser
    params = [torch.nn.Parameter(torch.randn(*s)) for s in shapes]
    w0 = [p.detach().clone() for p in params]
    radii = [w.norm().item() for w in w0]
    opt = MuonH(params, lr=0.05, momentum=0.95)
    g1 = [torch.randn(*s) for s in shapes]
    g2 = [torch.randn(*s) for s in shapes]
    for p, g in zip(params, g1):
        p.grad = g.clone()
    opt.step()
    # EMA momentum (method §7.1): buf₁ = 0.05·g₁, Nesterov update g₁ + 0.95·(buf₁ − g₁).
    after1 = [expected_muonh(w, r, g + 0.95 * (0.05 * g - g), 0.05) for w, r, g in zip(w0, radii, g1)]
    for p, e in zip(params, after1):
        torch.testing.assert_close(p.detach(), e, rtol=1e-5, atol=1e-6)
    for p, g in zip(params, g2):
        p.grad = g.clone()
    opt.step()
    for p, e1, r, a, b in zip(params, after1, radii, g1, g2):
        buf = 0.95 * (0.05 * a) + 0.05 * b
        torch.testing.assert_close(
            p.detach(), expected_muonh(e1, r, b + 0.95 * (buf - b), 0.05), rtol=1e-5, atol=1e-6
        )


def released_muonh_step(w, grad, buf, radius, lr, mu=0.95, ema=True):
    """One update of the authors' released ``muon_step_fused`` (nanochat/optim.py), re-written for one matrix
    in the input's dtype (no bf16). ``ema=False`` swaps in the plain accumulating momentum for comparison."""
    if ema:
        buf = buf.lerp(grad, 1 - mu)
        g = grad.lerp(buf, mu)
    else:
        buf = mu * buf + grad
        g = grad + mu * buf
    x = g / (g.norm() * 1.02 + 1e-6)
    for a, b, c in POLAR_EXPRESS_COEFFS:
        if x.size(0) > x.size(1):
            gram = x.T @ x
            x = a * x + x @ (b * gram + c * gram @ gram)
        else:
            gram = x @ x.T
            x = a * x + (b * gram + c * gram @ gram) @ x
    w = w - lr * x * (radius / x.norm().clamp_min(1e-10))
    return w * (radius / w.norm().clamp_min(1e-10)), buf


def test_muonh_matches_the_released_update_and_the_momentum_convention_matters_at_small_gradients():
    gen = torch.Generator().manual_seed(0)
    shapes = [(24, 8), (8, 24), (8, 24)]  # tall and wide; two of equal shape are stacked
    w0 = [torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes]

    def grads(norm):
        g = [torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes]
        return [x * (norm / x.norm()) for x in g]

    def rel(a, b, w):  # relative difference of two updates from the same weights w
        return ((a - w) - (b - w)).norm().item() / (a - w).norm().item()

    params = [torch.nn.Parameter(w.clone()) for w in w0]
    opt = MuonH(params, lr=0.02)
    ours, bufs = [w.clone() for w in w0], [torch.zeros_like(w) for w in w0]
    for step_grads in (grads(1e-2), grads(1e-2)):  # two steps: the buffer recursion is checked too
        before = [p.detach().clone() for p in params]
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()
        for i, g in enumerate(step_grads):
            ours[i], bufs[i] = released_muonh_step(ours[i], g, bufs[i], w0[i].norm(), 0.02)
            # MuonH stores R in fp32, hence 1e-5 rather than float64 round-off (the plain momentum form
            # misses by ~1e-2 here).
            assert rel(params[i].detach(), ours[i], before[i]) < 1e-5
    # One step from zero momentum: the EMA update is 0.0975·g, the plain one 1.95·g (20× larger). After
    # renormalisation only the 1e-6 in X/(‖X‖·1.02 + 1e-6) tells them apart: visibly at ‖g‖ = 1e-2,
    # negligibly at ‖g‖ = 10.
    for norm, low, high in ((1e-2, 2e-3, 5e-2), (10.0, 0.0, 1e-4)):
        for w, g in zip(w0, grads(norm)):
            zero = torch.zeros_like(w)
            ema, _ = released_muonh_step(w, g, zero, w.norm(), 0.02)
            plain, _ = released_muonh_step(w, g, zero, w.norm(), 0.02, ema=False)
            assert low <= rel(ema, plain, w) < high, (norm, rel(ema, plain, w))


@settings(max_examples=20, deadline=None)
@given(
    rows=st.integers(2, 24),
    cols=st.integers(2, 24),
    lr=st.floats(1e-4, 0.5),
    steps=st.integers(1, 4),
    seed=st.integers(0, 1000),
)
def test_muonh_keeps_every_matrix_on_its_initial_sphere(rows, cols, lr, steps, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(rows, cols, generator=g))
    radius = p.detach().norm().item()
    opt = MuonH([p], lr=lr)
    for _ in range(steps):
        p.grad = torch.randn(rows, cols, generator=g)
        before = p.detach().clone()
        opt.step()
        assert p.detach().norm().item() == pytest.approx(radius, rel=1e-5)
        assert not torch.equal(before, p.detach())


# Spec §7.3 / V4: D_ref of the s = 10 linear-injection 2-4-2 reference counted at the run's r (r = 1: the
# 20-layer model), as scripts/base_train.py's get_scaling_params(ref_model) counts it.
D_REF = {1: 983_315_200, 2: 606_380_800, 4: 1_016_083_200, 8: 1_835_488_000}


@pytest.mark.parametrize("r", sorted(D_REF))
def test_reference_tokens_match_v4_per_r(r):
    assert reference_tokens(paper_model(12, r), OptimConfig()) == D_REF[r]
    assert reference_tokens(paper_model(6, r), OptimConfig()) == D_REF[r]  # the run's width plays no part
    # "prose": one r = 4 reference for every looped run.
    prose = OptimConfig(d_ref_rule="prose")
    assert reference_tokens(paper_model(12, r), prose) == (D_REF[1] if r == 1 else D_REF[4])
    assert reference_tokens(paper_model(12, r), OptimConfig(d_ref=5e6)) == 5e6


@pytest.mark.parametrize("r", [2, 4, 8])
@pytest.mark.parametrize(
    "changes",
    [{"injection": "hyperconnect"}, {"injection": "additive"}, {"injection": "none"}, {"bptt_k": 1}],
    ids=["hyperconnect", "additive", "none", "truncated"],
)
def test_every_looped_run_uses_the_linear_reference(r, changes):
    model = paper_model(12, r, **changes)
    ref = reference_model(model, OptimConfig())
    assert (ref.width, ref.r, ref.layout().injection, ref.bptt_k) == (640, 4, "linear", None)
    assert reference_tokens(model, OptimConfig()) == D_REF[r]
    assert reference_tokens(model, OptimConfig(d_ref_rule="prose")) == D_REF[4]


def test_r1_reference_is_the_plain_model_whatever_the_injection():
    for changes in ({}, {"injection": "linear"}, {"injection": "none"}):
        ref = reference_model(paper_model(12, 1, **changes), OptimConfig())
        assert (ref.layout().prelude, ref.layout().rec_layers, ref.layout().injection) == (0, 20, "none")
        assert reference_tokens(paper_model(12, 1, **changes), OptimConfig()) == D_REF[1]


def test_scaled_down_reference_follows_the_same_rule():
    # The cpu preset's template (depth 10, prelude = coda = 1, ref_width 24): the looped reference is 1-2-1
    # with linear injection at d = 24, counted at the run's r. n_b = 12·24² + 2·24 = 6,960;
    # N_once = 2·n_b + 3·24 = 13,992; N_rec = 2·n_b + 2·24² = 15,072; plain: 10·n_b + 72 = 69,672.
    optim = OptimConfig(ref_width=24, ref_batch_tokens=1024)
    template = dict(depth=10, prelude=1, coda=1, head_dim=8, vocab_size=4096, seq_len=256)
    expected = {1: 696_720, 2: 10 * (13_992 + 2 * 15_072), 4: 10 * (13_992 + 4 * 15_072),
                8: 10 * (13_992 + 8 * 15_072)}
    for r, d_ref in expected.items():
        for injection in ("auto", "hyperconnect") if r > 1 else ("auto",):
            model = ModelConfig(width=48, r=r, injection=injection, **template)
            assert reference_tokens(model, optim) == d_ref
    prose = replace(optim, d_ref_rule="prose")
    assert reference_tokens(ModelConfig(width=48, r=8, **template), prose) == expected[4]


def test_d_ref_rule_is_validated():
    assert from_dict(OptimConfig, {"d_ref_rule": "prose"}).d_ref_rule == "prose"
    with pytest.raises(UserError, match="d_ref_rule must be one of released, prose"):
        from_dict(OptimConfig, {"d_ref_rule": "paper"})


def test_lr_data_tokens_is_int_c_over_f_or_steps_times_b():
    model = {"width": 768, "r": 4, "vocab_size": VOCAB, "seq_len": 2048}
    budget = from_dict(TrainConfig, {"model": model, "budget": 4.64e17})
    f = flops_per_token(budget.model)
    assert lr_data_tokens(budget, f) == int(4.64e17 / f) == 330_700_863
    assert steps_for_budget(4.64e17, f, BATCH_TOKENS) * BATCH_TOKENS == 330_825_728  # what is trained
    steps = from_dict(TrainConfig, {"model": model, "steps": 89_645, "batch_tokens": 524_288})
    assert lr_data_tokens(steps, f) == 46_999_797_760


@pytest.mark.parametrize(
    ("budget", "data_factor", "expected"), [(4.64e17, 1.432, 0.0201), (1e19, 0.536, 0.00751)]
)
def test_muonh_lr_matches_v4(budget, data_factor, expected):
    model = paper_model(12, 4)
    tokens = int(budget / flops_per_token(model))  # D = int(C / F), as the released script
    lr = muonh_lr(OptimConfig(), model, BATCH_TOKENS, tokens)
    assert round(lr / 0.014, 3) == data_factor
    # The paper prints 0.0201 for 0.014 × 1.432 = 0.020048; both printed figures hold within 0.3%.
    assert lr == pytest.approx(expected, rel=3e-3)


def test_width_factor_matches_v4():
    assert round(width_factor(OptimConfig(), 64 * 6), 4) == 1.2910
    assert round(width_factor(OptimConfig(), 64 * 34), 4) == 0.5423
    assert width_factor(OptimConfig(), 640) == 1.0


def test_extrapolation_learning_rates_match_v4():
    batch, tokens = 524_288, 46_999_797_760
    lr1 = peak_learning_rates(OptimConfig(), paper_model(34, 1), batch, tokens)
    lr4 = peak_learning_rates(OptimConfig(), paper_model(34, 4), batch, tokens)
    assert round(lr1["matrix"], 5) == 0.00598 and round(lr4["matrix"], 5) == 0.00604
    assert round(lr1["embed"] / 0.3, 4) == 0.7984
    # wte and lm_head get the batch factor 2^0.558 = 1.472; the norm gains and HC scalars do not.
    assert (round(lr1["embed"], 4), round(lr1["unembed"], 5), round(lr1["norm"], 5)) == (
        0.2395,
        0.00319,
        0.00271,
    )
    assert lr1["hc"] == pytest.approx(0.01 * width_factor(OptimConfig(), 64 * 34))
    assert lr4["norm"] == lr1["norm"] and lr4["embed"] == lr1["embed"]


def test_schedule_has_no_warmup_and_decays_linearly_to_ten_percent():
    assert lr_multiplier(0, 1000) == 1.0
    assert lr_multiplier(500, 1000) == pytest.approx(0.55)
    assert lr_multiplier(999, 1000) == pytest.approx(0.1 + 0.9 / 1000)
    values = [lr_multiplier(t, 37) for t in range(37)]
    diffs = {round(b - a, 12) for a, b in zip(values, values[1:])}
    assert diffs == {round(-0.9 / 37, 12)}


def tiny_model(**changes) -> LoopedGPT:
    torch.manual_seed(0)
    return LoopedGPT(ModelConfig(width=32, head_dim=16, depth=4, r=2, vocab_size=64, seq_len=8, **changes))


@pytest.mark.parametrize("injection", ["linear", "hyperconnect"])
def test_muonh_recipe_assigns_every_parameter_once(injection):
    model = tiny_model(injection=injection, prelude=1, coda=1)
    lrs = {"matrix": 0.01, "embed": 0.3, "unembed": 0.004, "norm": 0.005, "hc": 0.02}
    muon, adam = build_optimizers(model, OptimConfig(), lrs, "cpu")
    groups = model.param_groups()
    assert isinstance(muon, MuonH) and isinstance(adam, torch.optim.AdamW)
    assert [id(p) for p in muon.param_groups[0]["params"]] == [id(p) for p in groups["matrix"]]
    seen = [id(p) for opt in (muon, adam) for g in opt.param_groups for p in g["params"]]
    assert sorted(seen) == sorted(id(p) for p in model.parameters())
    for g in adam.param_groups:
        assert g["lr"] == lrs[g["name"]] and g["betas"] == (0.8, 0.95) and g["eps"] == 1e-10
        assert g["weight_decay"] == 0.0
    assert {g["name"] for g in adam.param_groups} == (
        {"embed", "unembed", "norm", "hc"} if injection == "hyperconnect" else {"embed", "unembed", "norm"}
    )
    set_lr([muon, adam], 0.5)
    assert (
        muon.param_groups[0]["lr"] == 0.005
        and {g["name"]: g["lr"] for g in adam.param_groups}["embed"] == 0.15
    )


def test_adamw_recipe_puts_matrices_on_adamw_with_the_width_rule():
    model = tiny_model(prelude=1, coda=1)
    optim = OptimConfig(recipe="adamw", adamw_matrix_lr=0.002, ref_width=128, ref_batch_tokens=64)
    lrs = peak_learning_rates(optim, model.cfg, 64, 1e6)
    assert lrs["matrix"] == pytest.approx(0.002 * (32 / 128) ** -0.5)
    (adam,) = build_optimizers(model, optim, lrs, "cpu")
    matrix = next(g for g in adam.param_groups if g["name"] == "matrix")
    assert len(matrix["params"]) == len(model.param_groups()["matrix"])
