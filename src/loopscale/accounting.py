"""Parameter and FLOPs accounting exactly as the paper counts them (method §3–§4).

Units: parameters are counts; FLOPs are per *token* (multiply by tokens for a run's total).
No torch here: the planner and the fitter use this module too.

What the analytic training count covers: every matmul with a weight (2 FLOPs per multiply-add, ×3 for
forward + backward), the per-block RMSNorm gains counted as if they were weights (the paper's convention),
and the two attention matmuls QKᵀ and AV at the full context T (12·d·T per layer per token, PaLM
convention, i.e. no causal halving). It leaves out the embedding lookup, softmax, norm arithmetic,
activation functions, RoPE and the softcap, and it charges the three model-level norm gains (3d) nothing.
Parcae's injection is charged like W_inj, as the weights it applies in every loop: B·e (d² multiply-adds, or d
for the per-dimension B) and the per-dimension A_log and dt_bias (2d, charged as weights like the norm gains).
A plugin's loop hook (``loopscale.plugins``) adds what it declares: its parameters to N_rec, its forward FLOPs
per token in every loop (3× where back-propagated); ``price`` checks both against the model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from loopscale.config import Layout, ModelConfig
from loopscale.errors import UserError
from loopscale.plugins import hook_counts


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of one model (method §3.1). ``n = n_once + n_rec`` exactly."""

    n: int  # non-embedding parameters: blocks + injection + 3d model-level norm gains
    n_once: int  # applied once per token: prelude, coda, the 3d model-level gains
    n_rec: int  # applied r times per token: recurrent block + injection (W_inj, Parcae's, HC scalars)
    n_embed: int  # wte + lm_head (padded vocabulary × d each)

    def as_dict(self) -> dict[str, int]:
        return {"n": self.n, "n_once": self.n_once, "n_rec": self.n_rec, "n_embed": self.n_embed}


def block_params(d: int) -> int:
    """One transformer block: q, k, v, o (4d²), MLP d→4d→d (8d²), two RMSNorm gains (2d)."""
    return 12 * d * d + 2 * d


def injection_params(d: int, layout: Layout, hc_lanes: int = 2) -> int:
    """Parameters of the injection applied in each loop: 2d² for linear (W_inj), d² + 2d for parcae (B, A_log,
    dt_bias), 3d for parcae-diag (a per-dimension B, A_log, dt_bias), 0 for additive/none.

    Hyperconnection scalars are per iteration (r·(K² + 2K) in all) and are added by ``count_params``.
    """
    return {"linear": 2 * d * d, "parcae": d * d + 2 * d, "parcae-diag": 3 * d}.get(layout.injection, 0)


def count_params(cfg: ModelConfig) -> ParamCounts:
    """N, N_once, N_rec, N_embed for ``cfg`` with the paper's split (injection in N_rec, 3d in N_once).

    The r·(K² + 2K) hyperconnection scalars count in N_rec (and N), as the authors' released code counts them
    (``GPT.num_scaling_params``/``effective_params`` put them with the injection, in the reused parameters).
    """
    d, lay = cfg.width, cfg.layout()
    n_b = block_params(d)
    n_rec = lay.rec_layers * n_b + injection_params(d, lay) + hook_counts(cfg)[0]
    n_once = (lay.prelude + lay.coda) * n_b + 3 * d
    if lay.injection == "hyperconnect":
        k = cfg.hc_lanes
        n_rec += lay.r * (k * k + 2 * k)
    n_embed = 2 * cfg.padded_vocab * d
    return ParamCounts(n=n_once + n_rec, n_once=n_once, n_rec=n_rec, n_embed=n_embed)


def ls_split(cfg: ModelConfig, rs: tuple[int, ...] = (1, 2, 4, 8)) -> tuple[float, float]:
    """The project page's least-squares (N_once, N_rec) split (method §3.4), a compatibility option.

    For the model's width, fit N(r) = N_once^LS + (L/r)·n_blk^LS by least squares over ``rs`` (L is the
    recurrent depth of the looped template, 16 in the paper) and return (N_once^LS, (L/r)·n_blk^LS) for
    ``cfg.r``. The two parts do not sum exactly to N.
    """
    lay = _looped_template(cfg).layout()
    rec_depth = lay.rec_layers * lay.r
    xs, ns = [], []
    for r in rs:
        variant = _with_r(cfg, r)
        xs.append(rec_depth / r)
        ns.append(count_params(variant).n)
    design = np.column_stack([np.ones(len(xs)), xs])
    (n_once_ls, n_blk_ls), *_ = np.linalg.lstsq(design, np.asarray(ns, dtype=float), rcond=None)
    return float(n_once_ls), float(rec_depth / cfg.r * n_blk_ls)


def _looped_template(cfg: ModelConfig) -> ModelConfig:
    # The LS split is defined on the looped layout (prelude/coda as configured), not the plain r = 1 one.
    return _with_r(cfg, 2)


def _with_r(cfg: ModelConfig, r: int) -> ModelConfig:
    return replace(cfg, r=r, bptt_k=None)


def flops_per_token(cfg: ModelConfig, *, training: bool = True, loops: int | None = None) -> int:
    """Per-token FLOPs with the paper's exact formula (method §4.2–4.3).

    training=True: F_train = 6·(P_prelude + P_coda + P_lm_head) + 6r·(P_recur + P_inject)
    + 12·d·T·(effective depth), with truncated BPTT charging the r − k detached loops forward-only
    (2× weights, 4·d·T attention) and hyperconnections charging (K² + 2K)·d per loop in place of P_inject.
    training=False: the forward pass only (2× weights, 4·d·T attention per layer), for inference cost.
    ``loops``: the loop iterations run (default the layout's r), e.g. a sampled depth or a curriculum step:
    the same layout (ℓ_rec, injection) applied ``loops`` times; truncation keeps the last min(k, loops).
    """
    d, lay, t = cfg.width, cfg.layout(), cfg.seq_len
    if loops is not None:
        if loops < 1:
            raise UserError(f"loop count must be >= 1, got {loops}")
        lay = replace(lay, r=loops)
    n_b = block_params(d)
    p_once = (lay.prelude + lay.coda) * n_b + cfg.padded_vocab * d
    if lay.injection == "hyperconnect":
        k = cfg.hc_lanes
        p_inject = (k * k + 2 * k) * d
    else:
        p_inject = injection_params(d, lay)
    p_loop = lay.rec_layers * n_b + p_inject
    attn_once = d * t * (lay.prelude + lay.coda)
    attn_loop = d * t * lay.rec_layers
    hook = hook_counts(cfg)[1]  # a plugin's declared forward FLOPs per loop (loopscale.plugins)
    if not training:
        return 2 * p_once + 2 * lay.r * p_loop + 4 * attn_once + 4 * lay.r * attn_loop + lay.r * hook
    k_full = lay.r if cfg.bptt_k is None else min(cfg.bptt_k, lay.r)
    f_detached = lay.r - k_full
    return (
        6 * p_once
        + (2 * f_detached + 6 * k_full) * p_loop
        + 12 * attn_once
        + (4 * f_detached + 12 * k_full) * attn_loop
        + (f_detached + 3 * k_full) * hook
    )


def steps_for_budget(budget: float, flops_per_token: int, batch_tokens: int) -> int:
    """steps = round(C / (F·B)) (method §4.4); a budget too small for one step is a UserError."""
    if budget <= 0:
        raise UserError(f"budget must be positive, got {budget:g} FLOPs")
    steps = round(budget / (flops_per_token * batch_tokens))
    if steps < 1:
        raise UserError(
            f"budget {budget:.3g} FLOPs is smaller than one step "
            f"({flops_per_token * batch_tokens:.3g} FLOPs = {flops_per_token:,} FLOPs/token × "
            f"{batch_tokens:,} tokens)"
        )
    return steps


def code_effective_params(cfg: ModelConfig, r: int | None = None) -> int:
    """N_once + r·N_rec (parameters): the authors' code's 'effective params', used only for the LR data
    reference. ``r`` defaults to ``cfg.r``; the released training script counts its reference model at the
    training run's r, which may differ from the reference's own (method §7.3)."""
    c = count_params(cfg)
    return c.n_once + (cfg.r if r is None else r) * c.n_rec
