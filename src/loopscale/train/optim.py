"""MuonH + AdamW (method §7.1–7.2), the LR transfer rules (§7.3) and the schedule (§7.4).

MuonH is Muon on the Frobenius sphere: for a matrix W with initial norm R = ‖W₀‖_F,
Nesterov momentum (μ = 0.95, EMA form) → Polar-Express orthogonalisation O → W′ = W − η·R·O/‖O‖_F →
W ← R·W′/‖W′‖_F. No weight decay. Matrices of equal shape are stacked and orthogonalised together.

Orthogonalisation precision: bf16 on CUDA (as in the paper), fp32 on CPU (bf16 matmuls are 2–3× slower
than fp32 on the CPUs we measured, and fp32 keeps CPU runs bit-reproducible across resume).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import torch
from torch import Tensor

from loopscale.accounting import code_effective_params
from loopscale.config import ModelConfig
from loopscale.errors import UserError
from loopscale.train.config import OptimConfig, TrainConfig

# Polar Express (Amsel et al. 2025, arXiv 2505.16932), 5 iterations, safety factor 2e-2 (as used by
# modded-nanogpt / nanochat): X ← a·X + (b·A + c·A²)·X with A = X·Xᵀ.
POLAR_EXPRESS_COEFFS: tuple[tuple[float, float, float], ...] = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
POLAR_EXPRESS_SAFETY = 1.02


def polar_express(g: Tensor, steps: int = 5, dtype: torch.dtype | None = None) -> Tensor:
    """Approximate the orthogonal polar factor U·Vᵀ of ``g`` ([..., m, n], batched over leading dims).

    The input is scaled to spectral norm ≤ 1 (by its Frobenius norm × 1.02), then ``steps`` odd
    polynomial iterations push every singular value towards 1. Computed in ``dtype`` (default: g's),
    returned in g's dtype.
    """
    x = g.to(dtype or g.dtype)
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) * POLAR_EXPRESS_SAFETY + 1e-6)
    for a, b, c in POLAR_EXPRESS_COEFFS[:steps]:
        gram = x @ x.mT
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    if tall:
        x = x.mT
    return x.to(g.dtype)


class MuonH(torch.optim.Optimizer):
    """Muon on the Frobenius sphere (MuonH) for 2-D weights; state: momentum buffer and radius R = ‖W₀‖_F.

    Momentum is the EMA form of the authors' released optimiser (method §7.1): buf ← buf + (1 − μ)(g − buf),
    update g + μ(buf − g) (Nesterov). The update is renormalised, so the momentum's scale would not matter but
    for the fixed 1e-6 in ``polar_express``'s input scaling, which weighs differently at small gradient norms.
    """

    def __init__(
        self,
        params,
        lr: float,
        momentum: float = 0.95,
        steps: int = 5,
        ortho_dtype: torch.dtype | None = None,
    ):
        params = list(params)
        if any(p.ndim != 2 for p in params):
            raise ValueError("MuonH updates 2-D matrices only")
        super().__init__(params, {"lr": lr, "momentum": momentum, "steps": steps})
        self.ortho_dtype = ortho_dtype

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 (torch.optim signature)
        for group in self.param_groups:
            by_shape: dict[tuple[int, ...], list[Tensor]] = defaultdict(list)
            for p in group["params"]:
                if p.grad is not None:
                    by_shape[tuple(p.shape)].append(p)
            mu = group["momentum"]
            for params in by_shape.values():
                updates, radii = [], []
                for p in params:
                    state = self.state[p]
                    if not state:
                        state["momentum_buffer"] = torch.zeros_like(p)
                        state["radius"] = p.detach().norm().to(torch.float32)
                    buf = state["momentum_buffer"]
                    buf.lerp_(p.grad, 1 - mu)  # EMA: μ·buf + (1 − μ)·g
                    updates.append(p.grad.lerp(buf, mu))  # Nesterov: g + μ·(buf − g)
                    radii.append(state["radius"])
                ortho = polar_express(torch.stack(updates), group["steps"], self.ortho_dtype)
                radius = torch.stack(radii).to(ortho.dtype).view(-1, 1, 1)
                ortho_norm = ortho.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-12)
                weights = torch.stack([p.detach() for p in params])
                moved = weights - group["lr"] * radius * ortho / ortho_norm
                moved = radius * moved / moved.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-12)
                for p, new in zip(params, moved):
                    p.copy_(new)
        return None


# ----------------------------------------------------------------------------------------------------------
# LR transfer (method §7.3) and schedule (§7.4)
# ----------------------------------------------------------------------------------------------------------


def reference_model(model: ModelConfig, optim: OptimConfig) -> ModelConfig:
    """The reference architecture of the LR data rule (method §7.3), as the released training script has it.

    Looped runs (r > 1, any injection, truncated or not): width ``optim.ref_width``, ``optim.ref_r_looped``
    loops and always linear injection (the paper's s = 10 2-4-2 model). Plain runs (r = 1): the plain
    ``depth``-layer model at ``optim.ref_width``. Depth, prelude, coda and head_dim follow ``model``, so
    scaled-down templates get their own reference by the same rule.
    """
    if model.r > 1:
        arch = {"r": optim.ref_r_looped, "injection": "linear"}
    else:
        arch = {"r": 1, "injection": "auto"}  # auto at r = 1: no prelude/coda, no injection
    ref = replace(model, width=optim.ref_width, bptt_k=None, **arch)
    try:
        ref.layout()
    except UserError as exc:
        raise UserError(
            f"cannot build the LR reference model ({exc}); set optim.d_ref (tokens) explicitly"
        ) from None
    return ref


def reference_tokens(model: ModelConfig, optim: OptimConfig) -> float:
    """D_ref in tokens: ``optim.d_ref`` if set, else d_ref_tokens_per_param (10) × (N_once + r·N_rec) of
    ``reference_model``, counted at the run's r (``d_ref_rule: released``, as the released script's
    ``get_scaling_params(ref_model)`` does) or at the reference's own r (``prose``).

    Paper template (method §7.3, V4): 606,380,800 (r = 2), 1,016,083,200 (r = 4), 1,835,488,000 (r = 8),
    983,315,200 (r = 1); under "prose" every r > 1 gets 1,016,083,200.
    """
    if optim.d_ref is not None:
        return float(optim.d_ref)
    ref = reference_model(model, optim)
    count_r = model.r if optim.d_ref_rule == "released" else ref.r
    return optim.d_ref_tokens_per_param * code_effective_params(ref, r=count_r)


def lr_data_tokens(cfg: TrainConfig, flops_per_token: int) -> int:
    """D of the MuonH data factor, in tokens: int(C / F) for a FLOPs budget, steps·B when steps are given.

    This is the released script's ``target_tokens``; with a budget it is C/F truncated, not the trained
    steps·B (they differ by the rounding of steps, at most B/2 tokens; method §7.3).
    """
    if cfg.steps is not None:
        return cfg.steps * cfg.batch_tokens
    return int(cfg.budget / flops_per_token)


def batch_factor(optim: OptimConfig, batch_tokens: int) -> float:
    """(B / B_ref)^0.558: MuonH, wte and lm_head (not the norm gains or HC scalars)."""
    return (batch_tokens / optim.ref_batch_tokens) ** optim.batch_exponent


def width_factor(optim: OptimConfig, width: int) -> float:
    """(d / d_ref)^(−0.5), the AdamW groups' width rule (1.2910 at s = 6, 0.5423 at s = 34)."""
    return (width / optim.ref_width) ** (-optim.width_exponent)


def muonh_lr(optim: OptimConfig, model: ModelConfig, batch_tokens: int, tokens: float) -> float:
    """Peak MuonH LR: matrix_lr · (B/B_ref)^0.558 · (D/D_ref)^(−0.32), D in tokens (``lr_data_tokens``)."""
    d_ref = reference_tokens(model, optim)
    return optim.matrix_lr * batch_factor(optim, batch_tokens) * (tokens / d_ref) ** (-optim.data_exponent)


def peak_learning_rates(
    optim: OptimConfig, model: ModelConfig, batch_tokens: int, tokens: float
) -> dict[str, float]:
    """Peak LR of every parameter group ("matrix", "embed", "unembed", "norm", "hc", "injection") after the
    transfer rules; ``batch_tokens`` is B and ``tokens`` the data-rule D (``lr_data_tokens``), both in tokens.

    wte and lm_head get the width and batch factors; the norm gains, HC scalars and Parcae's injection the
    width factor only (the released script passes its batch scale to the embedding and unembedding LRs alone;
    method §7.3; Parcae's injection, not in the paper, follows the HC scalars' rule). Under the
    "adamw" recipe the matrix group follows the wte/lm_head rule (width and batch, no data factor).
    """
    width = width_factor(optim, model.width)
    adam = width * batch_factor(optim, batch_tokens)
    if optim.recipe == "muonh":
        matrix = muonh_lr(optim, model, batch_tokens, tokens)
    else:
        matrix = optim.adamw_matrix_lr * adam
    return {
        "matrix": matrix,
        "embed": optim.embed_lr * adam,
        "unembed": optim.unembed_lr * adam,
        "norm": optim.norm_lr * width,
        "hc": optim.hc_lr * width,
        "injection": optim.injection_lr * width,
    }


def lr_multiplier(step: int, total_steps: int, final_fraction: float = 0.1) -> float:
    """m(t) = f + (1 − f)·(1 − t/N), t = 0 … N − 1: 1 at step 0, linear towards f (0.1); no warmup."""
    return final_fraction + (1.0 - final_fraction) * (1.0 - step / total_steps)


def build_optimizers(
    model: torch.nn.Module, optim: OptimConfig, peak_lrs: dict[str, float], device_type: str
) -> list[torch.optim.Optimizer]:
    """The run's optimisers over ``model.param_groups()``: [MuonH(matrix), AdamW(rest)] or [AdamW(all)].

    Every param group carries ``name`` and ``peak_lr``; ``set_lr`` applies the schedule to them. Parcae's
    injection ("injection") never decays, whatever ``optim.weight_decay`` says.
    """
    groups = model.param_groups()
    adam_groups = []
    names = ["embed", "unembed", "norm", "hc", "injection"] + (["matrix"] if optim.recipe == "adamw" else [])
    for name in names:
        if groups[name]:
            group = {"params": groups[name], "lr": peak_lrs[name], "peak_lr": peak_lrs[name], "name": name}
            adam_groups.append({**group, "weight_decay": 0.0} if name == "injection" else group)
    optimizers: list[torch.optim.Optimizer] = []
    if optim.recipe == "muonh" and groups["matrix"]:
        muon = MuonH(
            groups["matrix"],
            lr=peak_lrs["matrix"],
            momentum=optim.muon_momentum,
            steps=optim.polar_express_steps,
            ortho_dtype=torch.bfloat16 if device_type == "cuda" else torch.float32,
        )
        muon.param_groups[0].update(name="matrix", peak_lr=peak_lrs["matrix"])
        optimizers.append(muon)
    optimizers.append(
        torch.optim.AdamW(
            adam_groups,
            betas=tuple(optim.adam_betas),
            eps=optim.adam_eps,
            weight_decay=optim.weight_decay,
            foreach=device_type == "cuda",
        )
    )
    return optimizers


def set_lr(optimizers: list[torch.optim.Optimizer], multiplier: float) -> None:
    """Set every group's LR to peak_lr × multiplier."""
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["peak_lr"] * multiplier
