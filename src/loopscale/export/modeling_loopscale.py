"""A looped (depth-recurrent) transformer exported by ``loopscale export``, for ``transformers``.

This file is copied as it is into every exported folder and loaded with ``trust_remote_code=True``; it
imports nothing but ``torch`` and ``transformers``. Its forward pass is the one of loopscale's
``LoopedGPT`` (method §2 of the loopscale docs), operation for operation, so the logits agree in fp32:

    ids → wte → norm_emb → prelude (ℓ_p blocks) → e
        → r × [ injection(e, state) → recurrent block (ℓ_rec blocks) → norm_recur ]
        → coda (ℓ_c blocks) → norm_final → lm_head → slice to the true vocab → fp32 → softcap

Pre-norm blocks (RMSNorm with a gain), attention with half-split RoPE followed by a parameter-free RMS
QK-norm, a d → 4d → d MLP with relu(x)², no biases. Injection modes, with e the prelude output and h(i)
the state entering loop i: linear u = W_inj·[e; h], h(0) = e; additive u = h + e, h(0) = 0; none u = h,
h(0) = e; hyperconnect: K lanes ℓ_k(0) = e, u(i) = Σ_k α_ik ℓ_k(i), s(i) = norm_recur(block(u(i))),
ℓ_k(i+1) = Σ_j M_ikj ℓ_j(i) + β_ik s(i), the coda gets Σ_k ℓ_k(r); otherwise h(i+1) = norm_recur(block(u)).

The loop count is ``config.r``, read at every call (never copied at construction): set it with
``from_pretrained(..., r=8)`` or ``model.config.r = 8``. Hyperconnection parameters exist for
``config.r_train`` iterations only, so a hyperconnection model refuses more loops (at load and at call).
The KV cache holds one slot per (loop, layer): loop i of a new token attends to the loop-i keys and values
of the earlier tokens, exactly as the full forward pass does. Positions are absolute offsets into the
cache (``position_ids`` are ignored; RoPE scores depend on relative positions only, so left padding with an
attention mask gives the unpadded result). Without an attention mask the model is strictly causal.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_loopscale import LoopscaleConfig

# transformers renamed the output's cache field (``past_key_values`` → ``cache``) within 5.x
_OUTPUT_FIELDS = {field.name for field in dataclasses.fields(CausalLMOutputWithPast)}
_CACHE_FIELD = "cache" if "cache" in _OUTPUT_FIELDS else "past_key_values"


class LoopscaleRMSNorm(nn.Module):
    """RMS normalisation over the last dimension with a learnable gain."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.size(-1),), self.weight.to(x.dtype), self.eps)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Half-split rotary embedding of x [B, H, T, hd] with cos/sin [T, hd/2]."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


class LoopscaleAttention(nn.Module):
    def __init__(self, config: LoopscaleConfig):
        super().__init__()
        d = config.width
        self.n_head, self.head_dim, self.eps = d // config.head_dim, config.head_dim, config.norm_eps
        self.c_q = nn.Linear(d, d, bias=False)
        self.c_k = nn.Linear(d, d, bias=False)
        self.c_v = nn.Linear(d, d, bias=False)
        self.c_proj = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin, cache, slot: int, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (lin(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
                   for lin in (self.c_q, self.c_k, self.c_v))
        q = F.rms_norm(_rope(q, cos, sin), (self.head_dim,), eps=self.eps)
        k = F.rms_norm(_rope(k, cos, sin), (self.head_dim,), eps=self.eps)
        if cache is not None:
            k, v = cache.update(k, v, slot)
        if mask is not None:  # [B, 1, T, S] bool, True = attend (padding, or a chunk after a cache)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        elif t == k.size(2):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif t == 1:  # one new token attends to every cached position
            y = F.scaled_dot_product_attention(q, k, v)
        else:  # several new tokens after a cache: causal with an offset
            past = k.size(2) - t
            keep = torch.ones(t, k.size(2), dtype=torch.bool, device=x.device).tril(diagonal=past)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class LoopscaleMLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d, bias=False)
        self.c_proj = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.relu(self.c_fc(x)).square())


class LoopscaleBlock(nn.Module):
    def __init__(self, config: LoopscaleConfig):
        super().__init__()
        self.norm_attn = LoopscaleRMSNorm(config.width, config.norm_eps)
        self.attn = LoopscaleAttention(config)
        self.norm_mlp = LoopscaleRMSNorm(config.width, config.norm_eps)
        self.mlp = LoopscaleMLP(config.width)

    def forward(self, x, cos, sin, cache, slot: int, mask) -> torch.Tensor:
        x = x + self.attn(self.norm_attn(x), cos, sin, cache, slot, mask)
        return x + self.mlp(self.norm_mlp(x))


def check_loops(config: LoopscaleConfig) -> int:
    """The loop count ``config.r``, refused (ValueError) when the model cannot run it."""
    r = config.r
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise ValueError(f"loop count r must be an integer >= 1, got {r!r}")
    if config.injection == "hyperconnect" and r > config.r_train:
        raise ValueError(
            f"this hyperconnection model has per-iteration parameters for {config.r_train} loops only; "
            f"it cannot run r={r} (use r <= {config.r_train})"
        )
    return r


class LoopscalePreTrainedModel(PreTrainedModel):
    config_class = LoopscaleConfig
    base_model_prefix = "model"
    _no_split_modules = ["LoopscaleBlock"]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """loopscale's initialisation (used only for a model built from a config without weights)."""
        d = self.config.width
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=1.0)
        elif isinstance(module, LoopscaleRMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, nn.Linear):
            role = getattr(module, "loopscale_role", None)
            if role == "lm_head":
                nn.init.normal_(module.weight, mean=0.0, std=0.001)
            elif role == "inject":  # W_inj = [I | 0]
                module.weight.zero_()
                module.weight[:, :d].copy_(torch.eye(d))
            else:
                bound = (3.0 / module.in_features) ** 0.5
                nn.init.uniform_(module.weight, -bound, bound)
        elif isinstance(module, LoopscaleModel) and module.hc_alpha is not None:
            k, r = self.config.hc_lanes, self.config.r_train
            module.hc_alpha.copy_(F.one_hot(torch.arange(r) % k, k).float())
            module.hc_mix.copy_(torch.eye(k).expand(r, k, k))
            module.hc_beta.fill_(1.0)


class LoopscaleModel(LoopscalePreTrainedModel):
    """Everything but the unembedding: token ids → final hidden states [B, T, d] (after norm_final)."""

    def __init__(self, config: LoopscaleConfig):
        super().__init__(config)
        check_loops(config)
        d, eps = config.width, config.norm_eps
        self.wte = nn.Embedding(config.padded_vocab_size, d)
        self.norm_emb = LoopscaleRMSNorm(d, eps)
        self.prelude = nn.ModuleList(LoopscaleBlock(config) for _ in range(config.prelude))
        self.recur = nn.ModuleList(LoopscaleBlock(config) for _ in range(config.rec_layers))
        self.norm_recur = LoopscaleRMSNorm(d, eps)
        self.coda = nn.ModuleList(LoopscaleBlock(config) for _ in range(config.coda))
        self.norm_final = LoopscaleRMSNorm(d, eps)
        self.inject = None
        if config.injection == "linear":
            self.inject = nn.Linear(2 * d, d, bias=False)
            self.inject.loopscale_role = "inject"
        self.hc_alpha = self.hc_mix = self.hc_beta = None
        if config.injection == "hyperconnect":
            k, r = config.hc_lanes, config.r_train
            self.hc_alpha = nn.Parameter(torch.empty(r, k))
            self.hc_mix = nn.Parameter(torch.empty(r, k, k))
            self.hc_beta = nn.Parameter(torch.empty(r, k))
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.wte = value

    def _rope(self, start: int, t: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [t, head_dim/2] for positions start..start+t−1, computed as loopscale's tables are
        (fp64 angles, then fp32)."""
        half = self.config.head_dim // 2
        inv_freq = self.config.rope_theta ** (-torch.arange(half, dtype=torch.float64) / half)
        positions = torch.arange(start, start + t, dtype=torch.float64)
        angles = torch.outer(positions, inv_freq)
        return angles.cos().float().to(device), angles.sin().float().to(device)

    def forward(self, input_ids=None, attention_mask=None, cache=None, inputs_embeds=None) -> torch.Tensor:
        config = self.config
        r = check_loops(config)
        x = self.wte(input_ids) if inputs_embeds is None else inputs_embeds
        b, t = x.shape[:2]
        past = cache.get_seq_length() if cache is not None else 0
        if past + t > config.seq_len:
            raise ValueError(f"sequence of {past + t} tokens exceeds the model's seq_len {config.seq_len}")
        cos, sin = self._rope(past, t, x.device)
        mask = _padding_mask(attention_mask, b, t, past, x.device)
        slot = 0

        def run(blocks: nn.ModuleList, h: torch.Tensor) -> torch.Tensor:
            nonlocal slot
            for block in blocks:
                h = block(h, cos, sin, cache, slot, mask)
                slot += 1
            return h

        e = run(self.prelude, self.norm_emb(x))
        mode = config.injection
        if mode == "hyperconnect":
            k = config.hc_lanes
            lanes = [e] * k
            for i in range(r):
                u = sum(self.hc_alpha[i, j] * lanes[j] for j in range(k))
                s = self.norm_recur(run(self.recur, u))
                lanes = [sum(self.hc_mix[i, a, j] * lanes[j] for j in range(k)) + self.hc_beta[i, a] * s
                         for a in range(k)]
            h = sum(lanes)
        else:
            h = torch.zeros_like(e) if mode == "additive" else e
            for _ in range(r):
                if mode == "linear":
                    u = self.inject(torch.cat([e, h], dim=-1))
                elif mode == "additive":
                    u = h + e
                else:
                    u = h
                h = self.norm_recur(run(self.recur, u))
        return self.norm_final(run(self.coda, h))


def _padding_mask(attention_mask, b: int, t: int, past: int, device) -> torch.Tensor | None:
    """[B, 1, T, past+T] bool (True = attend) from a [B, past+T] 0/1 mask; None when it masks nothing
    (then attention is plain causal). A query always attends to itself, so a padding row has no empty
    softmax."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:
        raise ValueError("attention_mask must be [batch, tokens] of 0/1 (4-D masks are not supported)")
    keys = attention_mask[:, -(past + t):].to(device=device, dtype=torch.bool)
    if keys.shape != (b, past + t):
        raise ValueError(f"attention_mask of shape {tuple(attention_mask.shape)} does not cover "
                         f"{past + t} positions of {b} sequences")
    if bool(keys.all()):
        return None
    causal = torch.ones(t, past + t, dtype=torch.bool, device=device).tril(diagonal=past)
    own = torch.zeros(t, past + t, dtype=torch.bool, device=device)
    own[torch.arange(t), past + torch.arange(t)] = True
    return ((causal & keys[:, None, :]) | own).unsqueeze(1)


class LoopscaleForCausalLM(LoopscalePreTrainedModel, GenerationMixin):
    """The looped transformer with its unembedding: fp32 softcapped logits over the true vocabulary.

    Loading is strict: a state dict with missing, unexpected or differently shaped tensors is refused
    (ValueError), never filled with fresh weights.
    """

    _tied_weights_keys: dict = {}

    def __init__(self, config: LoopscaleConfig):
        super().__init__(config)
        self.model = LoopscaleModel(config)
        self.lm_head = nn.Linear(config.width, config.padded_vocab_size, bias=False)
        self.lm_head.loopscale_role = "lm_head"
        self.post_init()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        wanted_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        problems = [f"{key.replace('_', ' ')}: {sorted(map(str, info[key]))[:5]}"
                    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")
                    if info.get(key)]
        if problems:
            raise ValueError(f"the weights do not match this {cls.__name__} ({'; '.join(problems)}); "
                             "refusing a partial load")
        return (model, info) if wanted_info else model

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.wte = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache=None,
        past_key_values=None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        return_dict: bool | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """input_ids [B, T] → logits [B, T, vocab_size] (fp32, softcapped); with ``labels`` [B, T] also
        the mean next-token cross-entropy in nats (labels shifted inside, −100 ignored). A cache (passed,
        or created with ``use_cache=True``) holds one slot per (loop, layer)."""
        cache = cache if cache is not None else past_key_values
        if cache is None and use_cache:
            cache = DynamicCache()
        hidden = self.model(input_ids, attention_mask, cache, inputs_embeds)
        if isinstance(logits_to_keep, int):
            if logits_to_keep > 0:
                hidden = hidden[:, -logits_to_keep:]
        else:
            hidden = hidden[:, logits_to_keep]
        logits = self.lm_head(hidden)[..., : self.config.vocab_size]
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        cap = self.config.softcap
        logits = cap * torch.tanh(logits / cap)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten().to(logits.device),
                                   ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache})
