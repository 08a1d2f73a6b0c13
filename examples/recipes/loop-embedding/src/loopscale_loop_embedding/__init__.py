"""Loop-index embedding: a learned vector per loop iteration added to the recurrent block's input,
u(i) ← u(i) + p_i, p_i ∈ R^d, initialised to zero (so the model starts as the base run's, bit for bit).

It tells the shared block which iteration it runs, something none of loopscale's built-in recipes do: the
block otherwise sees only its input. ``pip install -e examples/recipes/loop-embedding`` registers it as
``loop-embedding``; ``loopscale price loop-embedding --reuse BASE`` prices it.

What it declares: r·d parameters (in N_rec, like the hyperconnection scalars) and d forward FLOPs per token
in each loop (the add). ``loopscale price`` measures both before training: FlopCounterMode counts matmuls
only and sees none of the add, which at d against a loop's 24·d²·ℓ_rec is far inside its 2% tolerance. The
vectors train with the norm gains (AdamW, norm_lr with the width factor).
"""

from __future__ import annotations

from loopscale.plugins import RecipePlugin


def build_hook(cfg):
    """The hook module of a model config: r zero vectors of width d (a loop count above r, at test time or
    under sampled depth, reuses the last one). torch is imported here, not at the top: accounting reads
    params and loop_flops without it."""
    import torch
    from torch import nn

    class LoopEmbedding(nn.Module):
        def __init__(self, loops: int, width: int):
            super().__init__()
            self.vectors = nn.Parameter(torch.zeros(loops, width))

        def forward(self, u: torch.Tensor, i: int) -> torch.Tensor:
            return u + self.vectors[min(i, len(self.vectors) - 1)].to(u.dtype)

    return LoopEmbedding(cfg.r, cfg.width)


RECIPE = RecipePlugin(
    name="loop-embedding",
    build_hook=build_hook,
    params=lambda cfg: cfg.r * cfg.width,
    loop_flops=lambda cfg: cfg.width,
    optim_group="norm",
)
