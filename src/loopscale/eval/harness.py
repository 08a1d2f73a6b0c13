"""lm-evaluation-harness adapter: a loopscale checkpoint as the lm-eval model ``loopscale``, at any r.

Optional extra (``pip install 'loopscale[lmeval]'``). Importing this module registers the model::

    import lm_eval, loopscale.eval.harness
    lm_eval.simple_evaluate(model="loopscale", model_args="checkpoint=sweep/runs/x,r=4", tasks=[...])

or, from the shell, lm-eval's own command line with the model registered::

    python -m loopscale.eval.harness run --model loopscale --model_args checkpoint=RUN,r=4
        --device cpu --tasks TASK

``model_args``: ``checkpoint`` (run or checkpoint folder), ``r`` (loop count; default the trained r),
``tokenizer`` (default: the checkpoint's), ``batch_tokens`` (input tokens per forward pass),
``max_gen_toks`` (default 256), ``device`` (from Python; lm-eval's command line passes its ``--device``).
lm-eval's ``batch_size`` is accepted and unused: batches are formed by token count. Requests are scored
exactly like ``loopscale eval`` (``continuation.encode_pairs`` and ``score_sequences``, requests with
one context packed after one computed prompt), log-likelihoods in nats.
``generate_until`` decodes greedily with the model's KV-cache ``generate()`` (one cache slot per
loop iteration, method §2.9): at most ``max_gen_toks`` and at most half the context T new tokens, so the
prompt keeps at least the last T/2 tokens (its left part is cut); decoding stops as soon as the text holds
a stop string, or at BOS.
"""

from __future__ import annotations

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the lm-eval adapter needs the extra: pip install 'loopscale[lmeval]'") from exc

import torch

from loopscale.errors import UserError
from loopscale.eval.continuation import (
    DEFAULT_BATCH_TOKENS,
    ScoredSequence,
    encode_pairs,
    groups_by,
    score_sequences,
)
from loopscale.eval.suite import EvalModel, load_eval_model

DEFAULT_MAX_GEN_TOKS = 256


@register_model("loopscale")
class LoopscaleLM(LM):
    """A loopscale checkpoint evaluated with ``r`` loops (see the module docstring for the arguments)."""

    def __init__(
        self,
        checkpoint: str | None = None,
        r: int | None = None,
        tokenizer: str | None = None,
        device: str | None = None,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
        loaded: EvalModel | None = None,
        batch_size: int | str | None = None,  # lm-eval's option; batches are formed by tokens instead
        max_batch_size: int | None = None,
    ) -> None:
        super().__init__()
        if loaded is None:
            if checkpoint is None:
                raise UserError("the loopscale lm-eval model needs model_args checkpoint=RUN_OR_CHECKPOINT")
            loaded = load_eval_model(checkpoint, tokenizer, device)
        self.loaded = loaded
        self.r = loaded.resolve_r(r)
        self.batch_tokens = int(batch_tokens)
        self.max_gen_toks = int(max_gen_toks)
        self._logits = loaded.logits_fn(self.r)

    @classmethod
    def from_loaded(cls, loaded: EvalModel, r: int | None = None, **options) -> LoopscaleLM:
        """Wrap an already loaded model (e.g. one built in memory) without reading a checkpoint."""
        return cls(loaded=loaded, r=r, **options)

    @property
    def max_length(self) -> int:
        """Model context T in tokens."""
        return self.loaded.seq_len

    def _encode(self, text: str) -> list[int]:
        return self.loaded.tokenizer.encode(text, add_special_tokens=False).ids

    def _score(self, sequences: list[ScoredSequence], groups=()):
        return score_sequences(sequences, self._logits, groups=groups, max_batch_tokens=self.batch_tokens,
                               pad_id=self.loaded.bos_id, device=self.loaded.device)

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """(log p(continuation | context) in nats, continuation is the greedy decode) per request."""
        pairs = [tuple(req.args) for req in requests]
        sequences = encode_pairs(self.loaded.tokenizer, self.loaded.bos_id, pairs, self.max_length)
        out = []
        # requests with one context (a multiple-choice question's options) share one computed prompt
        for pair, score in zip(pairs, self._score(sequences, groups_by([context for context, _ in pairs]))):
            result = (-score.loss_sum, score.greedy)
            self.cache_hook.add_partial("loglikelihood", pair, result)
            out.append(result)
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood (nats) of each whole string after BOS, in disjoint windows of T predictions with
        the maximal context (lm-eval's rolling windows)."""
        owners, sequences = [], []
        for i, req in enumerate(requests):
            windows = get_rolling_token_windows(
                token_list=self._encode(req.args[0]), prefix_token=self.loaded.bos_id,
                max_seq_len=self.max_length, context_len=1,
            )
            for context, predicted in map(make_disjoint_window, windows):
                owners.append(i)
                sequences.append(ScoredSequence(tuple(context + predicted), len(predicted)))
        totals = [0.0] * len(requests)
        for owner, score in zip(owners, self._score(sequences)):
            totals[owner] -= score.loss_sum
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", (req.args[0],), total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuation of each context until a stop string, BOS, or ``max_gen_toks`` tokens."""
        model, bos = self.loaded.model, self.loaded.bos_id
        out = []
        for req in requests:
            context, gen_kwargs = req.args
            gen_kwargs = dict(gen_kwargs or {})
            if gen_kwargs.get("do_sample") or float(gen_kwargs.get("temperature") or 0.0) > 0.0:
                raise UserError("the loopscale lm-eval model decodes greedily only; set do_sample: false")
            until = gen_kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = min(int(gen_kwargs.get("max_gen_toks", self.max_gen_toks)), self.max_length // 2)
            prompt = [bos, *self._encode(context)][-(self.max_length - max_new):]
            idx = torch.tensor([prompt], dtype=torch.long, device=self.loaded.device)
            stops = [s for s in until if s]

            def done(new: torch.Tensor, stops: list[str] = stops) -> bool:
                ids = new[0].tolist()
                return ids[-1] == bos or any(s in self.loaded.tokenizer.decode(ids) for s in stops)

            with torch.no_grad(), self.loaded.autocast():
                generated = model.generate(idx, max_new, r=self.r, stop=done)[0, len(prompt):].tolist()
            if bos in generated:
                generated = generated[: generated.index(bos)]
            text = self.loaded.tokenizer.decode(generated)
            for stop in stops:
                if stop in text:
                    text = text[: text.index(stop)]
            self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
            out.append(text)
        return out


def main() -> None:
    """lm-eval's command line with the ``loopscale`` model registered."""
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
