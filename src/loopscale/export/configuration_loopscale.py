"""Configuration of a looped (depth-recurrent) transformer exported by ``loopscale export``.

This file is copied as it is into every exported folder and loaded by ``transformers`` with
``trust_remote_code=True``; it imports nothing but ``transformers``.

Layer layout: prelude (``prelude`` blocks) → the shared block of ``rec_layers`` blocks applied ``r``
times → coda (``coda`` blocks). ``r`` is the loop count the model runs, an ordinary attribute read at
every forward pass: ``from_pretrained(DIR, trust_remote_code=True, r=8)`` or ``model.config.r = 8``
evaluates at another loop count than ``r_train``, the one it was trained with. A hyperconnection model
(``injection="hyperconnect"``) has parameters per loop iteration and cannot run more than ``r_train`` loops.
"""

from __future__ import annotations

from transformers import PretrainedConfig

INJECTIONS = ("linear", "additive", "none", "hyperconnect")


class LoopscaleConfig(PretrainedConfig):
    """Architecture of one exported loopscale model (every length in tokens, every size in units).

    ``width`` d_model; ``depth`` the effective depth at ``r_train`` (prelude + r_train·rec_layers + coda);
    ``head_dim`` channels per attention head; ``injection`` how the prelude output e enters each loop
    (linear: W_inj·[e; h], additive: h + e, none: passthrough, hyperconnect: ``hc_lanes`` lanes with
    per-iteration mixing scalars); ``vocab_size`` the true vocabulary (logits are sliced to it),
    ``padded_vocab_size`` the rows of the embedding and unembedding; ``seq_len`` the context T the model
    was trained with (the longest sequence it accepts); ``softcap`` the logit soft cap (logits =
    softcap·tanh(z/softcap)); ``norm_eps`` the RMSNorm ε; ``rope_theta`` the RoPE base.
    """

    model_type = "loopscale_looped"

    def __init__(
        self,
        width: int = 640,
        depth: int = 20,
        r: int = 1,
        r_train: int | None = None,
        prelude: int = 2,
        coda: int = 2,
        rec_layers: int | None = None,
        head_dim: int = 128,
        injection: str = "linear",
        hc_lanes: int = 2,
        bptt_k: int | None = None,
        vocab_size: int = 32001,
        padded_vocab_size: int | None = None,
        seq_len: int = 2048,
        softcap: float = 15.0,
        norm_eps: float = 1e-6,
        rope_theta: float = 10000.0,
        bos_token_id: int | None = None,
        eos_token_id: int | None = None,
        pad_token_id: int | None = None,
        tie_word_embeddings: bool = False,
        **kwargs,
    ):
        if injection not in INJECTIONS:
            raise ValueError(f"injection must be one of {', '.join(INJECTIONS)}, got {injection!r}")
        self.width = int(width)
        self.depth = int(depth)
        self.r = int(r)
        self.r_train = int(r_train if r_train is not None else r)
        self.prelude = int(prelude)
        self.coda = int(coda)
        if rec_layers is None:
            rec_layers = (self.depth - self.prelude - self.coda) // self.r_train
        self.rec_layers = int(rec_layers)
        self.head_dim = int(head_dim)
        self.injection = injection
        self.hc_lanes = int(hc_lanes)
        self.bptt_k = bptt_k  # training only (truncated BPTT); the forward pass does not depend on it
        self.vocab_size = int(vocab_size)
        self.padded_vocab_size = int(padded_vocab_size or -(-self.vocab_size // 64) * 64)
        self.seq_len = int(seq_len)
        self.softcap = float(softcap)
        self.norm_eps = float(norm_eps)
        self.rope_theta = float(rope_theta)
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.tie_word_embeddings = bool(tie_word_embeddings)
        if self.width % self.head_dim or self.head_dim % 2:
            raise ValueError(f"width {self.width} must be a multiple of head_dim {self.head_dim}, "
                             "and head_dim even")
        super().__init__(**kwargs)

    # Names that transformers and evaluation harnesses read, derived from the fields above. The number of
    # layers is the number of layer *applications* at the current r: a KV cache holds one slot per
    # (loop, layer), so it follows ``r`` whenever ``r`` changes.

    @property
    def num_hidden_layers(self) -> int:
        """Layer applications per token at loop count ``r``: prelude + r·rec_layers + coda."""
        return self.prelude + self.r * self.rec_layers + self.coda

    @property
    def hidden_size(self) -> int:
        return self.width

    @property
    def num_attention_heads(self) -> int:
        return self.width // self.head_dim

    @property
    def num_key_value_heads(self) -> int:
        return self.width // self.head_dim

    @property
    def intermediate_size(self) -> int:
        return 4 * self.width

    @property
    def max_position_embeddings(self) -> int:
        """The trained context T (tokens); lm-eval reads it as the model's maximum length."""
        return self.seq_len
