"""The looped transformer of the paper (method §2), in one readable file.

    idx → wte → norm_emb → prelude (ℓ_p blocks) → e
        → r × [ injection(e, state) → recurrent block (ℓ_rec blocks) → norm_recur ]
        → coda (ℓ_c blocks) → norm_final → lm_head → slice to the true vocab → fp32 → softcap 15

Every block is pre-norm: x ← x + Attn(RMSNorm(x)); x ← x + MLP(RMSNorm(x)); RMSNorm has a learnable gain
(ε = cfg.norm_eps); attention applies RoPE (half-split, θ = cfg.rope_theta) and then a parameter-free RMS
QK-norm, and runs causal ``F.scaled_dot_product_attention``; the MLP is d → 4d → d with relu(x)². No biases.

Injection modes (``cfg.layout().injection``), with e the prelude output and h(i) the state entering loop i:
  linear        u(i) = W_inj·[e ; h(i)], W_inj ∈ R^{d×2d} initialised [I | 0], h(0) = e
  additive      u(i) = h(i) + e, h(0) = 0
  none          u(i) = h(i), h(0) = e (passthrough; the plain r = 1 model)
  hyperconnect  K lanes ℓ_k(0) = e; u(i) = Σ_k α_ik ℓ_k(i); s(i) = norm_recur(block(u(i)));
                ℓ_k(i+1) = Σ_j M_ikj ℓ_j(i) + β_ik s(i); the coda gets Σ_k ℓ_k(r)
  parcae        u(i) = exp(−Δ⊙a)⊙h(i) + Δ⊙(B·e), a = exp(A_log), Δ = softplus(dt_bias) ∈ R^d, B ∈ R^{d×d},
                h(0) = e; init A_log = 0, Δ = ln(5)/2, B = I, so u(i) = 0.447·h(i) + 0.805·e (decay √(1/5))
  parcae-diag   the same with a per-dimension B ∈ R^d (init ones): B·e is B⊙e
The Parcae modes start from cfg.loop_init: h(0) = e (auto, input), 0 (zero), or, as Parcae's code does, noise
drawn anew in every forward pass from torch's global generator (random: normal, std √(2/(5d)), truncated at
±3 std; the generator's state is in every checkpoint, so a resumed run draws what the uninterrupted one did).
and otherwise h(i+1) = norm_recur(block(u(i))). Parcae's injection (Prairie et al. 2026) comes alone here: its
value embeddings and zero-initialised residuals are other recipes, left out. B·e is recomputed in every loop,
as W_inj·[e; h] re-multiplies e, which is what the FLOPs count charges (accounting).

A plugin recipe (cfg.loop_hook, loopscale.plugins) may add one module called on every loop's block input,
u(i) ← hook(u(i), i), before the recurrent block runs; without one the loop is as above.

Truncated BPTT (cfg.bptt_k = k): the state (HC: the lanes) leaving every iteration i < r − k is detached,
so only the last k iterations are back-propagated; the forward pass is unchanged. Training recipes that vary
the loop count (sampled depth, curricula: ``loopscale.train.plan``) run ``forward(..., r=T)``.

The module is dtype-agnostic (fp32 parameters); the training loop wraps it in bf16 autocast on CUDA. The
logits and the softcap are always computed in fp32.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from loopscale.config import PARCAE_INJECTIONS, ModelConfig
from loopscale.errors import UserError
from loopscale.plugins import load_plugin

# Parcae's initial per-dimension step Δ = softplus(dt_bias) = ln(5)/2, so that with a = exp(0) = 1 the state's
# decay exp(−Δ·a) starts at √(1/5) ≈ 0.447.
PARCAE_INIT_DELTA = math.log(5.0) / 2


class RMSNorm(nn.Module):
    """RMS normalisation over the last dimension with a learnable gain (init 1)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The gain follows the activation dtype (bf16 under autocast) so the fused kernel applies.
        return F.rms_norm(x, (x.size(-1),), self.weight.to(x.dtype), self.eps)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Half-split rotary embedding: x = [x1 | x2] → [x1·cos + x2·sin | x2·cos − x1·sin]. x: [B, H, T, hd]."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


class KVSlot:
    """Keys and values of one layer application (one loop iteration of one layer) for cached decoding."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.width
        self.n_head, self.head_dim, self.eps = cfg.n_head, cfg.head_dim, cfg.norm_eps
        self.c_q = nn.Linear(d, d, bias=False)
        self.c_k = nn.Linear(d, d, bias=False)
        self.c_v = nn.Linear(d, d, bias=False)
        self.c_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVSlot | None,
                mask: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        q, k, v = (lin(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
                   for lin in (self.c_q, self.c_k, self.c_v))
        q = F.rms_norm(apply_rope(q, cos, sin), (self.head_dim,), eps=self.eps)
        k = F.rms_norm(apply_rope(k, cos, sin), (self.head_dim,), eps=self.eps)
        if kv is not None:
            if kv.k is not None:
                k, v = torch.cat([kv.k, k], dim=2), torch.cat([kv.v, v], dim=2)
            kv.k, kv.v = k, v
        if mask is not None:  # packed sequences (no cache): the caller's [B, 1, T, T] mask, True = attend
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif t == k.size(2):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif t == 1:  # one new token attends to every cached position
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            raise ValueError("cached attention supports a full prefill or one new token at a time")
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d, bias=False)
        self.c_proj = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm_attn = RMSNorm(cfg.width, cfg.norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.norm_mlp = RMSNorm(cfg.width, cfg.norm_eps)
        self.mlp = MLP(cfg.width)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVSlot | None,
                mask: Tensor | None = None) -> Tensor:
        x = x + self.attn(self.norm_attn(x), cos, sin, kv, mask)
        return x + self.mlp(self.norm_mlp(x))


class LoopedGPT(nn.Module):
    """Prelude → shared block × r → coda, built from ``cfg.layout()`` with the paper's initialisation."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.layout = lay = cfg.layout()
        d, eps = cfg.width, cfg.norm_eps
        self.wte = nn.Embedding(cfg.padded_vocab, d)
        self.norm_emb = RMSNorm(d, eps)
        self.prelude = nn.ModuleList(Block(cfg) for _ in range(lay.prelude))
        self.recur = nn.ModuleList(Block(cfg) for _ in range(lay.rec_layers))
        self.norm_recur = RMSNorm(d, eps)
        self.coda = nn.ModuleList(Block(cfg) for _ in range(lay.coda))
        self.norm_final = RMSNorm(d, eps)
        self.lm_head = nn.Linear(d, cfg.padded_vocab, bias=False)
        self.inject = nn.Linear(2 * d, d, bias=False) if lay.injection == "linear" else None
        if lay.injection in PARCAE_INJECTIONS:
            # Linear mode's nn.Linear just drew its (overwritten) default init; draw the same numbers here, so
            # that every shared parameter reset_parameters draws next is the linear model's, bit for bit.
            torch.empty(d, 2 * d).uniform_()
            self.parcae_a_log = nn.Parameter(torch.empty(d))  # a = exp(A_log)
            self.parcae_dt_bias = nn.Parameter(torch.empty(d))  # Δ = softplus(dt_bias)
            self.parcae_b = nn.Parameter(torch.empty(d, d) if lay.injection == "parcae" else torch.empty(d))
        if lay.injection == "hyperconnect":
            k = cfg.hc_lanes
            self.hc_alpha = nn.Parameter(torch.empty(lay.r, k))  # lane mix into the block input
            self.hc_mix = nn.Parameter(torch.empty(lay.r, k, k))  # M_i, lane-to-lane carry
            self.hc_beta = nn.Parameter(torch.empty(lay.r, k))  # how much of s(i) each lane receives
        cos, sin = self._rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()
        # a plugin's hook on each loop's block input, built after the shared init so that init is the base's
        self.loop_hook = load_plugin(cfg.loop_hook).build_hook(cfg) if cfg.loop_hook else None

    @staticmethod
    def _rope_tables(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin of shape [seq_len, head_dim/2] (fp32; cast to the activation dtype when applied)."""
        half = cfg.head_dim // 2
        inv_freq = cfg.rope_theta ** (-torch.arange(half, dtype=torch.float64) / half)
        angles = torch.outer(torch.arange(cfg.seq_len, dtype=torch.float64), inv_freq)
        return angles.cos().float(), angles.sin().float()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The paper's initialisation (method §2.8)."""
        d = self.cfg.width
        nn.init.normal_(self.wte.weight, mean=0.0, std=1.0)
        nn.init.normal_(self.lm_head.weight, mean=0.0, std=0.001)
        a_d, a_4d = math.sqrt(3.0 / d), math.sqrt(3.0 / (4 * d))
        for block in self.blocks():
            for lin in (block.attn.c_q, block.attn.c_k, block.attn.c_v, block.attn.c_proj, block.mlp.c_fc):
                nn.init.uniform_(lin.weight, -a_d, a_d)
            nn.init.uniform_(block.mlp.c_proj.weight, -a_4d, a_4d)
        for module in self.modules():
            if isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        if self.inject is not None:
            self.inject.weight.zero_()
            self.inject.weight[:, :d].copy_(torch.eye(d))
        if self.layout.injection in PARCAE_INJECTIONS:
            self.parcae_a_log.zero_()
            self.parcae_dt_bias.fill_(math.log(math.expm1(PARCAE_INIT_DELTA)))  # softplus⁻¹(Δ)
            if self.parcae_b.ndim == 2:
                self.parcae_b.copy_(torch.eye(d))
            else:
                self.parcae_b.fill_(1.0)
        if self.layout.injection == "hyperconnect":
            k = self.cfg.hc_lanes
            self.hc_alpha.copy_(F.one_hot(torch.arange(self.layout.r) % k, k).float())
            self.hc_mix.copy_(torch.eye(k).expand(self.layout.r, k, k))
            self.hc_beta.fill_(1.0)

    def blocks(self) -> list[Block]:
        """Every distinct block (prelude, recurrent, coda), each once."""
        return [*self.prelude, *self.recur, *self.coda]

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by optimiser group: "matrix" (block matrices + W_inj, MuonH), "embed" (wte),
        "unembed" (lm_head), "norm" (every RMSNorm gain), "hc" (hyperconnection scalars, else empty),
        "injection" (Parcae's A_log, dt_bias and B, on AdamW without weight decay; else empty)."""
        matrix = [p for block in self.blocks() for p in block.parameters() if p.ndim == 2]
        if self.inject is not None:
            matrix.append(self.inject.weight)
        norm = [m.weight for m in self.modules() if isinstance(m, RMSNorm)]
        hc = [self.hc_alpha, self.hc_mix, self.hc_beta] if self.layout.injection == "hyperconnect" else []
        parcae = self.layout.injection in PARCAE_INJECTIONS
        injection = [self.parcae_a_log, self.parcae_dt_bias, self.parcae_b] if parcae else []
        groups = {"matrix": matrix, "embed": [self.wte.weight], "unembed": [self.lm_head.weight],
                  "norm": norm, "hc": hc, "injection": injection}
        if self.loop_hook is not None:  # a plugin routes its hook's parameters to one group
            groups[load_plugin(self.cfg.loop_hook).optim_group] += self.loop_hook.parameters()
        assert sum(len(g) for g in groups.values()) == len(list(self.parameters()))
        return groups

    def parcae_injection(self, e: Tensor, h: Tensor) -> Tensor:
        """Parcae's block input u = exp(−Δ⊙a)⊙h + Δ⊙(B·e), a = exp(A_log), Δ = softplus(dt_bias) (per
        dimension; B a d×d matrix, or a vector applied element-wise). e, h: [B, T, d]; the vectors follow the
        activation dtype (bf16 under autocast), as the norm gains do."""
        delta = F.softplus(self.parcae_dt_bias)
        decay = torch.exp(-delta * torch.exp(self.parcae_a_log))
        b_e = F.linear(e, self.parcae_b) if self.parcae_b.ndim == 2 else e * self.parcae_b.to(e.dtype)
        return decay.to(h.dtype) * h + delta.to(b_e.dtype) * b_e

    def initial_state(self, e: Tensor) -> Tensor:
        """h(0), the state entering the first loop (e: the prelude output [B, T, d]), for every mode but
        hyperconnect: 0 for additive and for loop_init zero, noise for loop_init random, else e itself."""
        if self.layout.injection == "additive" or self.cfg.loop_init == "zero":
            return torch.zeros_like(e)
        if self.cfg.loop_init == "random":
            # Parcae's "like-init" state of its released configs: N(0, std²) truncated at ±3 std, drawn as
            # nn.init.trunc_normal_ does (an inverse CDF of a uniform), written out so torch.compile keeps
            # it in the graph (trunc_normal_ reads its bounds back with .item(), a graph break)
            std = math.sqrt(2 / (5 * self.cfg.width))
            lo = (1 + math.erf(-3 / math.sqrt(2))) / 2  # Φ(−3)
            u = torch.rand_like(e, dtype=torch.float32) * (1 - 2 * lo) + lo
            noise = torch.erfinv(2 * u - 1) * (math.sqrt(2) * std)
            return noise.clamp(-3 * std, 3 * std).to(e.dtype)
        return e

    def _loops(self, r: int | None) -> int:
        r = self.layout.r if r is None else r
        if r < 1:
            raise UserError(f"loop count r must be >= 1, got {r}")
        if self.layout.injection == "hyperconnect" and r > self.layout.r:
            raise UserError(
                f"hyperconnection scalars exist for {self.layout.r} loops only; cannot run r={r} (use r <= "
                f"{self.layout.r})"
            )
        return r

    def _hidden(self, idx: torch.Tensor, r: int, cache: list[KVSlot] | None, pos: int,
                token_pos: Tensor | None = None, attn_mask: Tensor | None = None) -> torch.Tensor:
        """Final hidden states [B, T, d] for tokens at positions pos..pos+T−1 (cache: one slot per layer
        application, i.e. prelude + r·ℓ_rec + coda slots). Packed sequences instead give each token's
        position ``token_pos`` [B, T] and who attends to whom, ``attn_mask`` [B, T, T] (True = attend)."""
        t = idx.size(1)
        if token_pos is not None:
            # the check reads a value back from the tensor: skipped while torch.compile traces (a graph break)
            if not torch.compiler.is_compiling() and int(token_pos.max()) >= self.cfg.seq_len:
                raise UserError(f"token position {int(token_pos.max())} exceeds the model's seq_len "
                                f"{self.cfg.seq_len}")
            cos, sin = self.rope_cos[token_pos].unsqueeze(1), self.rope_sin[token_pos].unsqueeze(1)
        elif pos + t > self.cfg.seq_len:
            raise UserError(f"sequence of {pos + t} tokens exceeds the model's seq_len {self.cfg.seq_len}")
        else:
            cos, sin = self.rope_cos[pos:pos + t], self.rope_sin[pos:pos + t]
        mask = attn_mask.unsqueeze(1) if attn_mask is not None else None
        slots = iter(cache) if cache is not None else None

        def run(blocks: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
            for block in blocks:
                x = block(x, cos, sin, next(slots) if slots is not None else None, mask)
            return x

        mode = self.layout.injection
        e = run(self.prelude, self.norm_emb(self.wte(idx)))
        # Truncated BPTT: the state leaving iteration i < r − k is detached (none without bptt_k).
        detach_below = r - self.cfg.bptt_k if self.cfg.bptt_k is not None else 0
        if mode == "hyperconnect":
            k = self.cfg.hc_lanes
            lanes = [e] * k
            for i in range(r):
                u = sum(self.hc_alpha[i, j] * lanes[j] for j in range(k))
                if self.loop_hook is not None:
                    u = self.loop_hook(u, i)
                s = self.norm_recur(run(self.recur, u))
                lanes = [sum(self.hc_mix[i, a, j] * lanes[j] for j in range(k)) + self.hc_beta[i, a] * s
                         for a in range(k)]
            h = sum(lanes)
        else:
            h = self.initial_state(e)
            for i in range(r):
                if mode == "linear":
                    u = self.inject(torch.cat([e, h], dim=-1))
                elif mode in PARCAE_INJECTIONS:
                    u = self.parcae_injection(e, h)
                elif mode == "additive":
                    u = h + e
                else:
                    u = h
                if self.loop_hook is not None:
                    u = self.loop_hook(u, i)
                h = self.norm_recur(run(self.recur, u))
                if i < detach_below:
                    h = h.detach()
        return self.norm_final(run(self.coda, h))

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(h)[..., : self.cfg.vocab_size]
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp32 (fp64 stays fp64)
        cap = self.cfg.softcap
        return cap * torch.tanh(logits / cap)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        r: int | None = None,
        reduction: str = "mean",
    ) -> torch.Tensor:
        """idx [B, T] token ids → fp32 softcapped logits [B, T, vocab_size], or with ``targets`` the
        cross-entropy in nats (targets == −1 are ignored): "mean" → scalar, "none" → [B, T] (0 where
        ignored). ``r`` overrides the trained loop count (evaluation at r_eval ≠ r_train)."""
        logits = self._logits(self._hidden(idx, self._loops(r), None, 0))
        if targets is None:
            return logits
        if reduction not in ("mean", "none"):
            raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1, reduction=reduction)
        return loss if reduction == "mean" else loss.view_as(targets)

    def logits_at(self, idx: torch.Tensor, positions: torch.Tensor, *, r: int | None = None,
                  token_pos: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None) -> Tensor:
        """fp32 softcapped logits [n, vocab_size] at the n True entries of ``positions`` [B, T] (row-major
        order), the same values as ``forward(idx, r=r)[positions]``. Scoring a continuation needs only its
        few positions, and for a small model the unembedding is a large share of the forward pass.

        ``token_pos`` [B, T] (RoPE positions) and ``attn_mask`` [B, T, T] (bool, True = attend) score
        packed rows: several continuations after one shared prompt, each attending to the prompt and to
        itself (eval's multiple-choice options), so the prompt is computed once."""
        hidden = self._hidden(idx, self._loops(r), None, 0, token_pos, attn_mask)
        return self._logits(hidden[positions])

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        r: int | None = None,
        stop: Callable[[torch.Tensor], bool] | None = None,
    ) -> torch.Tensor:
        """Greedy decoding: returns [B, T0 + n] token ids, n = max_new_tokens unless ``stop(new)`` (called
        with the [B, n] tokens generated so far after each step) returned True earlier.

        The KV cache holds one slot per layer *application*, so loop i of a new token attends to the
        loop-i keys/values of earlier tokens, exactly as in the full forward pass (method §2.9).
        """
        r = self._loops(r)
        if idx.ndim != 2 or idx.size(1) == 0:
            raise UserError(f"generate needs a [batch, tokens] prompt with at least one token, got "
                            f"shape {tuple(idx.shape)}")
        if max_new_tokens < 0:
            raise UserError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if idx.size(1) + max_new_tokens > self.cfg.seq_len:
            raise UserError(
                f"prompt ({idx.size(1)} tokens) + max_new_tokens ({max_new_tokens}) exceeds seq_len "
                f"{self.cfg.seq_len}"
            )
        if max_new_tokens == 0:
            return idx
        lay = self.layout
        cache = [KVSlot() for _ in range(lay.prelude + r * lay.rec_layers + lay.coda)]
        out, pos, step_input = idx, 0, idx
        for _ in range(max_new_tokens):
            h = self._hidden(step_input, r, cache, pos)
            next_token = self._logits(h[:, -1]).argmax(dim=-1, keepdim=True)
            pos += step_input.size(1)
            out = torch.cat([out, next_token], dim=1)
            step_input = next_token
            if stop is not None and stop(out[:, idx.size(1):]):
                break
        return out
