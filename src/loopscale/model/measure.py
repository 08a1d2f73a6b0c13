"""A plugin's declared counts against the model's own (``loopscale price`` before it trains a plugin recipe).

Parameters are counted on the built hook; FLOPs by ``torch.utils.flop_counter.FlopCounterMode`` over one
forward and backward pass of a [1, T] batch, with and without the hook, so that what both passes share (the
counter's SDPA backward recomputing QKᵀ, the norms it does not see: tests/model/test_flops.py) cancels and
the difference is the hook's. CPU SDPA is not in torch's formula registry; its kernels are mapped onto
torch's own SDPA formulas.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from loopscale.accounting import count_params, flops_per_token
from loopscale.config import ModelConfig
from loopscale.errors import UserError
from loopscale.plugins import hook_counts

TOLERANCE = 0.02  # of the model's N and training FLOPs per token
_aten = torch.ops.aten
CPU_SDPA = {
    _aten._scaled_dot_product_flash_attention_for_cpu:
        lambda q, k, v, *args, out_shape=None, **kwargs: sdpa_flop_count(q, k, v),
    _aten._scaled_dot_product_flash_attention_for_cpu_backward:
        lambda grad, q, k, v, *args, out_shape=None, **kwargs: sdpa_backward_flop_count(grad, q, k, v),
}


def measured_flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token that FlopCounterMode counts over one forward + backward of a [1, T] batch."""
    from loopscale.model.gpt import LoopedGPT

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LoopedGPT(cfg)
        idx = torch.randint(0, cfg.vocab_size, (1, cfg.seq_len))
        with FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
            model(idx, idx).backward()
    return counter.get_total_flops() / cfg.seq_len


def check_hook_counts(cfg: ModelConfig, name: str) -> None:
    """Refuse a loop hook whose declared parameters or FLOPs are off the measured ones by more than 2% of
    the model's N or training FLOPs per token (one line naming recipe ``name``, the cell and both counts)."""
    from loopscale.model.gpt import LoopedGPT

    plain = dataclasses.replace(cfg, loop_hook=None)
    with torch.random.fork_rng(devices=[]):
        hook = LoopedGPT(cfg).loop_hook
    params = sum(p.numel() for p in hook.parameters())
    flops = measured_flops_per_token(cfg) - measured_flops_per_token(plain)
    declared_params = hook_counts(cfg)[0]
    declared_flops = flops_per_token(cfg) - flops_per_token(plain)
    n, f = count_params(cfg).n, flops_per_token(cfg)
    where = f"recipe {name} at width {cfg.width}, r={cfg.r}"
    if abs(declared_params - params) > TOLERANCE * n:
        raise UserError(f"{where}: its loop hook declares {declared_params:,} parameters, the model has "
                        f"{params:,} (more than 2% of N = {n:,} apart): fix the plugin's params(cfg)")
    if abs(declared_flops - flops) > TOLERANCE * f:
        raise UserError(f"{where}: its loop hook declares {declared_flops:,.0f} training FLOPs per token, a "
                        f"forward/backward pass measures {flops:,.0f} (more than 2% of {f:,} apart): fix the "
                        "plugin's loop_flops(cfg)")
