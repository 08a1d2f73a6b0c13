"""accounting.py against the numbers of docs/method.md: §3.3, §3.4, V1–V3 of §14, closed forms of §3.2/§4.2.

Integers must match exactly; FLOPs to the printed digits (method §14).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopscale.accounting import (
    block_params,
    code_effective_params,
    count_params,
    flops_per_token,
    ls_split,
    steps_for_budget,
)
from loopscale.config import ModelConfig
from loopscale.errors import UserError
from loopscale.paper import BATCH_TOKENS, MAIN_GRID, TRUNCATED_BPTT_GRID, ceil_half

RS = (1, 2, 4, 8)


def paper(s: int, r: int, **kw) -> ModelConfig:
    """The paper's iso-depth template at d = 64·s (depth 20, prelude = coda = 2, T 2048, V 32,064)."""
    return ModelConfig(width=64 * s, r=r, **kw)


# §3.3: s → N for r = 1, 2, 4, 8 (exact) and F for r = 1, 2, 4, 8 (as printed).
TABLE_3_3_N = {
    6: (35_405_952, 21_538_944, 14_457_984, 10_917_504),
    8: (62_936_576, 38_286_848, 25_699_840, 19_406_336),
    10: (98_331_520, 59_818_880, 40_152_960, 30_320_000),
    12: (141_590_784, 86_135_040, 57_817_344, 43_658_496),
    14: (192_714_368, 117_235_328, 78_692_992, 59_421_824),
    16: (251_702_272, 153_119_744, 102_779_904, 77_609_984),
    18: (318_554_496, 193_788_288, 130_078_080, 98_222_976),
    20: (393_271_040, 239_240_960, 160_587_520, 121_260_800),
    22: (475_851_904, 289_477_760, 194_308_224, 146_723_456),
    24: (566_297_088, 344_498_688, 231_240_192, 174_610_944),
    28: (770_780_416, 468_892_928, 314_737_920, 237_660_416),
    34: (1_136_487_808, 691_365_248, 464_068_992, 350_420_864),
}
TABLE_3_3_F = {
    6: ("4.7505e+08", "4.7859e+08", "4.8213e+08", "4.8920e+08"),
    8: ("7.2777e+08", "7.3406e+08", "7.4035e+08", "7.5293e+08"),
    10: ("1.0277e+09", "1.0375e+09", "1.0473e+09", "1.0670e+09"),
    12: ("1.3748e+09", "1.3889e+09", "1.4031e+09", "1.4314e+09"),
    14: ("1.7690e+09", "1.7883e+09", "1.8076e+09", "1.8461e+09"),
    16: ("2.2105e+09", "2.2357e+09", "2.2608e+09", "2.3112e+09"),
    18: ("2.6992e+09", "2.7310e+09", "2.7629e+09", "2.8266e+09"),
    20: ("3.2350e+09", "3.2743e+09", "3.3136e+09", "3.3923e+09"),
    22: ("3.8180e+09", "3.8656e+09", "3.9132e+09", "4.0083e+09"),
    24: ("4.4482e+09", "4.5049e+09", "4.5615e+09", "4.6747e+09"),
    28: ("5.8502e+09", "5.9273e+09", "6.0043e+09", "6.1585e+09"),
    34: ("8.3071e+09", "8.4207e+09", "8.5343e+09", "8.7616e+09"),
}


@pytest.mark.parametrize("s", sorted(TABLE_3_3_N))
@pytest.mark.parametrize("i,r", list(enumerate(RS)))
def test_table_3_3_parameters_and_flops(s, i, r):
    ns, fs = TABLE_3_3_N[s], TABLE_3_3_F[s]
    cfg = paper(s, r)
    counts = count_params(cfg)
    assert counts.n == ns[i]
    assert counts.n_once + counts.n_rec == counts.n
    assert counts.n_embed == 2 * 32_064 * 64 * s
    assert f"{flops_per_token(cfg):.4e}" == fs[i]


# V1: (s, r) → (N, N_once, N_rec); None where the split is irrelevant (r = 1).
V1 = [
    (6, 1, 35_405_952, None, None),
    (6, 2, 21_538_944, 7_082_112, 14_456_832),
    (6, 4, 14_457_984, 7_082_112, 7_375_872),
    (6, 8, 10_917_504, 7_082_112, 3_835_392),
    (10, 4, 40_152_960, 19_667_840, 20_485_120),
    (12, 2, 86_135_040, 28_320_000, 57_815_040),
    (20, 8, 121_260_800, 78_657_280, 42_603_520),
    (24, 4, 231_240_192, 113_263_104, 117_977_088),
    (34, 1, 1_136_487_808, None, None),
    (34, 8, 350_420_864, 227_302_784, 123_118_080),
]


@pytest.mark.parametrize("s,r,n,n_once,n_rec", V1)
def test_v1_parameter_counts(s, r, n, n_once, n_rec):
    counts = count_params(paper(s, r))
    assert counts.n == n
    if n_once is not None:
        assert (counts.n_once, counts.n_rec) == (n_once, n_rec)


# V2: training FLOPs per token.
V2 = [
    (dict(s=6, r=1), 475_047_936),
    (dict(s=6, r=4), 482_125_824),
    (dict(s=8, r=1), 727_769_088),
    (dict(s=10, r=1), 1_027_676_160),
    (dict(s=10, r=4), 1_047_336_960),
    (dict(s=20, r=4), 3_313_643_520),
    (dict(s=34, r=1), 8_307_062_784),
    (dict(s=34, r=4), 8_534_341_632),
    (dict(s=10, r=2, bptt_k=1), 793_016_320),
    (dict(s=10, r=4, bptt_k=2), 799_569_920),
    (dict(s=10, r=8, bptt_k=4), 812_677_120),
    (dict(s=10, r=4, injection="hyperconnect", hc_lanes=2), 1_027_799_040),
    (dict(s=10, r=4, injection="additive"), 1_027_676_160),
    (dict(s=10, r=4, injection="none"), 1_027_676_160),
]


@pytest.mark.parametrize("kw,expected", V2, ids=lambda v: str(v))
def test_v2_flops_per_token(kw, expected):
    kw = dict(kw)
    assert flops_per_token(paper(kw.pop("s"), kw.pop("r"), **kw)) == expected


def test_v2_model_level_gains_are_not_charged():
    # Adding the 3d model-level gains (×6) would give 7.2778e8 instead of 7.2777e8 (spec V2).
    f = flops_per_token(paper(8, 1))
    assert f"{f:.4e}" == "7.2777e+08" and f"{f + 6 * 3 * 512:.4e}" == "7.2778e+08"


# V3: steps and tokens (B = 262,144 unless stated).
V3 = [
    (4.64e17, dict(s=6, r=1), 3_726, 976_748_544),
    (1e18, dict(s=10, r=4), 3_642, 954_728_448),
    (1e18, dict(s=10, r=4, injection="additive"), 3_712, 973_078_528),
    (1e18, dict(s=10, r=4, injection="none"), 3_712, 973_078_528),
    (1e18, dict(s=10, r=4, injection="hyperconnect"), 3_712, 973_078_528),
    (4.64e18, dict(s=16, r=2), 7_917, 2_075_394_048),
    (1e19, dict(s=20, r=1), 11_792, 3_091_202_048),
    (2.15e19, dict(s=34, r=8), 9_361, 2_453_929_984),
    (1e18, dict(s=10, r=4, bptt_k=2), 4_771, 1_250_689_024),
    (2.15e18, dict(s=18, r=8, injection="hyperconnect"), 3_038, 796_393_472),
]


@pytest.mark.parametrize("budget,kw,steps,tokens", V3, ids=lambda v: str(v))
def test_v3_steps_and_tokens(budget, kw, steps, tokens):
    kw = dict(kw)
    cfg = paper(kw.pop("s"), kw.pop("r"), **kw)
    got = steps_for_budget(budget, flops_per_token(cfg), BATCH_TOKENS)
    assert (got, got * BATCH_TOKENS) == (steps, tokens)


# §5.2: (C, s) → (D r=1 published in Table 6, billions; steps for r = 1, 2, 4, 8).
GRID_5_2 = {
    (4.64e17, 6): (0.98, (3726, 3698, 3671, 3618)),
    (4.64e17, 8): (0.64, (2432, 2411, 2391, 2351)),
    (4.64e17, 10): (0.45, (1722, 1706, 1690, 1659)),
    (4.64e17, 12): (0.34, (1288, 1274, 1262, 1237)),
    (1.00e18, 6): (2.10, (8030, 7971, 7912, 7798)),
    (1.00e18, 8): (1.36, (5242, 5197, 5153, 5066)),
    (1.00e18, 10): (0.97, (3712, 3677, 3642, 3575)),
    (1.00e18, 12): (0.72, (2775, 2747, 2719, 2665)),
    (1.00e18, 14): (0.56, (2156, 2133, 2110, 2066)),
    (2.15e18, 8): (2.95, (11270, 11173, 11078, 10893)),
    (2.15e18, 10): (2.08, (7981, 7905, 7831, 7687)),
    (2.15e18, 12): (1.55, (5966, 5905, 5845, 5730)),
    (2.15e18, 14): (1.20, (4636, 4586, 4537, 4443)),
    (2.15e18, 16): (0.96, (3710, 3669, 3628, 3549)),
    (4.64e18, 10): (4.49, (17224, 17060, 16900, 16589)),
    (4.64e18, 12): (3.34, (12875, 12744, 12615, 12366)),
    (4.64e18, 14): (2.59, (10005, 9898, 9792, 9588)),
    (4.64e18, 16): (2.07, (8007, 7917, 7829, 7659)),
    (4.64e18, 18): (1.70, (6558, 6481, 6406, 6262)),
    (4.64e18, 20): (1.42, (5471, 5406, 5342, 5218)),
    (1.00e19, 12): (7.13, (27748, 27465, 27188, 26650)),
    (1.00e19, 16): (4.43, (17257, 17063, 16873, 16505)),
    (1.00e19, 18): (3.62, (14133, 13968, 13807, 13496)),
    (1.00e19, 20): (3.05, (11792, 11650, 11512, 11245)),
    (1.00e19, 24): (2.20, (8576, 8468, 8363, 8160)),
    (2.15e19, 18): (7.78, (30386, 30031, 29685, 29016)),
    (2.15e19, 24): (4.71, (18438, 18206, 17980, 17545)),
    (2.15e19, 28): (3.58, (14019, 13837, 13659, 13318)),
    (2.15e19, 34): (2.52, (9873, 9740, 9610, 9361)),
}


def test_all_116_grid_steps_and_the_published_tokens():
    assert sorted(GRID_5_2) == sorted((c, s) for c, scales in MAIN_GRID.items() for s in scales)
    for (budget, s), (d_published, steps) in GRID_5_2.items():
        got = [steps_for_budget(budget, flops_per_token(paper(s, r)), BATCH_TOKENS) for r in RS]
        assert tuple(got) == steps, (budget, s)
        # Table 6 carries 2–3 significant figures; the formula is within 3% of it (method §4.4).
        assert abs(got[0] * BATCH_TOKENS / 1e9 / d_published - 1) < 0.03
        # F·B·steps is within about 0.1% of C.
        for r, n_steps in zip(RS, got):
            assert abs(flops_per_token(paper(s, r)) * BATCH_TOKENS * n_steps / budget - 1) < 1.5e-3


def test_truncated_bptt_token_gain_and_flops_ratio():
    """V3: median D_trunc/D_full over the 69 truncated runs is 1.316; §4.3: F_trunc/F_full ∈ 0.74–0.77."""
    ratios = []
    for budget, scales in TRUNCATED_BPTT_GRID.items():
        for s in scales:
            for r in (2, 4, 8):
                full, trunc = paper(s, r), paper(s, r, bptt_k=ceil_half(r))
                d_full = steps_for_budget(budget, flops_per_token(full), BATCH_TOKENS)
                d_trunc = steps_for_budget(budget, flops_per_token(trunc), BATCH_TOKENS)
                ratios.append(d_trunc / d_full)
                assert 0.735 <= flops_per_token(trunc) / flops_per_token(full) < 0.775
    assert len(ratios) == 69
    assert round(statistics.median(ratios), 3) == 1.316


def test_extrapolation_run_tokens_and_flops():
    steps, batch = 89_645, 524_288
    assert steps * batch == 46_999_797_760
    assert f"{flops_per_token(paper(34, 1)) * steps * batch:.2e}" == "3.90e+20"
    assert f"{flops_per_token(paper(34, 4)) * steps * batch:.2e}" == "4.01e+20"


def test_injection_overhead_share():
    """§4.5: linear injection costs 6r·2d²/F: 1.9% at s = 10 and 2.7% at s = 34 (r = 4)."""
    for s, share in ((10, 0.019), (34, 0.027)):
        d = 64 * s
        assert round(6 * 4 * 2 * d * d / flops_per_token(paper(s, 4)), 3) == share


# §3.4: the least-squares split (compatibility option).
LS_TABLE = {
    6: (7_466_780, 1_748_442),
    8: (13_272_398, 3_108_000),
    10: (20_736_362, 4_855_930),
    12: (29_858_671, 6_992_233),
    14: (40_639_327, 9_516_907),
    16: (53_078_328, 12_429_953),
    18: (67_175_674, 15_731_371),
    20: (82_931_367, 19_421_162),
    24: (119_417_789, 27_965_859),
    28: (162_537_594, 38_064_043),
    34: (239_654_895, 56_124_111),
}


@pytest.mark.parametrize("s", sorted(LS_TABLE))
def test_ls_split_table(s):
    n_once_ls, n_blk_ls = LS_TABLE[s]
    for r in RS:
        once, rec = ls_split(paper(s, r))
        assert abs(once - n_once_ls) <= 1
        assert abs(rec * r / 16 - n_blk_ls) <= 1
        assert abs(rec - 16 / r * n_blk_ls) <= 16


# ---------------------------------------------------------------------------------------------------------
# Closed forms (§3.2, §4.2) and invariants, for any width.

widths = st.integers(1, 64).map(lambda s: 64 * s)


@given(d=widths)
def test_closed_forms_3_2(d):
    def counts(r):
        return count_params(ModelConfig(width=d, head_dim=64, r=r))

    assert counts(1).n == 240 * d * d + 43 * d
    for r, n, n_once, n_rec in [
        (2, 146 * d * d + 27 * d, 48 * d * d + 11 * d, 98 * d * d + 16 * d),
        (4, 98 * d * d + 19 * d, 48 * d * d + 11 * d, 50 * d * d + 8 * d),
        (8, 74 * d * d + 15 * d, 48 * d * d + 11 * d, 26 * d * d + 4 * d),
    ]:
        c = counts(r)
        assert (c.n, c.n_once, c.n_rec) == (n, n_once, n_rec)
        assert code_effective_params(ModelConfig(width=d, head_dim=64, r=r)) == n_once + r * n_rec


@given(d=widths, r=st.sampled_from(RS))
def test_closed_form_flops_4_2(d, r):
    cfg = ModelConfig(width=d, head_dim=64, r=r)
    assert flops_per_token(cfg) == (1440 + 12 * r * (r > 1)) * d * d + 684_144 * d
    # Forward only is exactly a third of training at full BPTT (2× vs 6× weights, 4dT vs 12dT).
    assert 3 * flops_per_token(cfg, training=False) == flops_per_token(cfg)
    # Parameter-free injections cost the same as r = 1; hyperconnections add 6r(K² + 2K)·d.
    for injection in ("additive", "none"):
        assert flops_per_token(replace(cfg, injection=injection)) == flops_per_token(replace(cfg, r=1))
    for k in (1, 2, 3):
        hc = replace(cfg, injection="hyperconnect", hc_lanes=k)
        assert flops_per_token(hc) - flops_per_token(replace(cfg, r=1)) == 6 * r * (k * k + 2 * k) * d
        # The r·(K² + 2K) scalars count in N_rec (and N), as in the authors' released code; N_once unchanged.
        plain = count_params(replace(cfg, injection="none"))
        assert count_params(hc).n_once == plain.n_once
        assert count_params(hc).n_rec - plain.n_rec == r * (k * k + 2 * k)


@given(d=widths, r=st.sampled_from((2, 4, 8)), data=st.data())
def test_truncated_flops_formula_4_3(d, r, data):
    k = data.draw(st.integers(1, r))
    cfg = ModelConfig(width=d, head_dim=64, r=r, bptt_k=k)
    f = r - k
    t, lay, v = 2048, cfg.layout(), 32_064
    p_loop = lay.rec_layers * block_params(d) + 2 * d * d
    expected = (6 * (4 * block_params(d) + v * d) + (2 * f + 6 * k) * p_loop + 12 * d * t * 4
                + (4 * f + 12 * k) * d * t * lay.rec_layers)
    assert flops_per_token(cfg) == expected
    assert flops_per_token(cfg, training=False) == flops_per_token(replace(cfg, bptt_k=None), training=False)


@given(d=widths, r=st.sampled_from((2, 4, 8)))
def test_parcae_injection_counts_and_flops_by_hand(d, r):
    """Issue 41: Parcae's B (d², or d for the per-dimension B), A_log and dt_bias (2d) count in N_rec, and F
    charges them as W_inj is charged, as weights applied in every loop (6 per parameter, 2 forward only)."""
    cfg = ModelConfig(width=d, head_dim=64, r=r)  # the paper template, linear injection
    plain = count_params(replace(cfg, injection="none"))
    rec_layers = 16 // r
    for injection, params in (("parcae", d * d + 2 * d), ("parcae-diag", 3 * d)):
        parcae = replace(cfg, injection=injection)
        counts = count_params(parcae)
        assert counts.n_once == plain.n_once == 48 * d * d + 11 * d
        assert counts.n_rec == rec_layers * (12 * d * d + 2 * d) + params == plain.n_rec + params
        assert counts.n == counts.n_once + counts.n_rec
        none = replace(cfg, injection="none")
        assert flops_per_token(parcae) - flops_per_token(none) == 6 * r * params
        forward = flops_per_token(parcae, training=False) - flops_per_token(none, training=False)
        assert forward == 2 * r * params
    # the closed forms of §4.2 with Parcae's injection in place of W_inj's 12r·d²
    parcae, diag = replace(cfg, injection="parcae"), replace(cfg, injection="parcae-diag")
    assert flops_per_token(parcae) == (1440 + 6 * r) * d * d + (684_144 + 12 * r) * d
    assert flops_per_token(diag) == 1440 * d * d + (684_144 + 18 * r) * d


@given(d=widths, r=st.sampled_from((2, 4, 8)), loops=st.integers(1, 24))
def test_flops_at_another_loop_count(d, r, loops):
    """flops_per_token(cfg, loops=T): the model's layout (ℓ_rec, W_inj) run T times, not the iso-depth model
    with r = T (what a sampled depth or a curriculum step executes)."""
    cfg = ModelConfig(width=d, head_dim=64, r=r)
    t, v, rec_layers = 2048, 32_064, 16 // r
    p_loop = rec_layers * block_params(d) + 2 * d * d
    expected = 6 * (4 * block_params(d) + v * d) + 6 * loops * p_loop + 12 * d * t * (4 + loops * rec_layers)
    assert flops_per_token(cfg, loops=loops) == expected
    assert 3 * flops_per_token(cfg, training=False, loops=loops) == expected
    with pytest.raises(UserError, match="loop count must be >= 1"):
        flops_per_token(cfg, loops=0)


@given(d=st.integers(6, 64).map(lambda s: 64 * s), r=st.sampled_from(RS))
def test_unique_parameter_ratios_v8(d, r):
    """V8: 0.608 / 0.408 / 0.308 at "any d" (from the paper's smallest width up; d-linear terms vanish)."""
    ratio = count_params(ModelConfig(width=d, head_dim=64, r=r)).n / count_params(ModelConfig(width=d, r=1)).n
    assert round(ratio, 3) == {1: 1.0, 2: 0.608, 4: 0.408, 8: 0.308}[r]


def test_steps_for_budget_refuses_budgets_below_one_step():
    f = flops_per_token(paper(6, 1))
    with pytest.raises(UserError, match="smaller than one step"):
        steps_for_budget(f * BATCH_TOKENS * 0.4, f, BATCH_TOKENS)
    with pytest.raises(UserError, match="positive"):
        steps_for_budget(0, f, BATCH_TOKENS)
    assert steps_for_budget(f * BATCH_TOKENS * 0.6, f, BATCH_TOKENS) == 1
