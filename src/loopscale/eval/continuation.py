"""Per-token continuation loss (method §10.1), written against a generic logits function.

Metric, in nats:
  example  Σ cross-entropy of the gold continuation's tokens given the prompt / number of those tokens;
  task     Σ over examples of the summed cross-entropy / Σ continuation tokens (token-weighted);
  MC       the loss is the gold option's; accuracy picks the option with the lowest mean per-token loss.
For LM tasks the secondary accuracy is CORE's: every continuation token is the model's argmax.

Tokenisation rule: as in lm-evaluation-harness, trailing whitespace of the context is moved to the start of
the continuation (``"Answer: " + "Paris"`` → ``"Answer:" + " Paris"``); then the context alone and
context + continuation are tokenised, and the scored tokens are those of the joint encoding from the first
one that differs from the context-alone encoding. When the context's tokens are a prefix of the joint
encoding (the usual case) this is exactly lm-eval's "tokens past the context's token count"; when a token
merges across the boundary (``"The loop" + "ing"`` → ``" looping"``) the merged token is scored, so the
scored span always covers the whole continuation as the tokenizer writes it in running text and is never
empty. BOS is prepended. A sequence longer than the model context is cut from the left (the continuation
is kept whole; a continuation longer than the context is an error).

Shots that do not fit: when more than 10% of a task's sequences would be cut, the task is scored with
fewer shots, the most that keep the cut share at or below 10% (down to 0), as evaluators of short-context
models do; the result records both counts and the sequences still cut. The choice depends on the
tokenizer and the model context only, so every r of a sweep sees identical prompts.

Batching: sequences are sorted by length and right-padded; with causal attention the padding cannot
influence earlier positions, so batched scores equal one-by-one scores (to float round-off). Only the
scored positions are unembedded (``LogitsFn`` receives their mask), under ``torch.inference_mode``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from loopscale.errors import UserError
from loopscale.eval.tasks import Task, render_context

# (idx [B, T] int64, positions [B, T] bool) → fp32 logits [n, vocab] at the n True positions, row-major
LogitsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
DEFAULT_BATCH_TOKENS = 8192
MAX_TRUNCATED_FRACTION = 0.10  # above this share of cut sequences a task is scored with fewer shots


@dataclass(frozen=True)
class ScoredSequence:
    """Token ids ``BOS + context + continuation`` (left-truncated); the last ``n_continuation`` are scored."""

    tokens: tuple[int, ...]
    n_continuation: int
    truncated: bool = False


@dataclass(frozen=True)
class ContinuationScore:
    """Score of one continuation: summed cross-entropy (nats) over its tokens, and greedy agreement."""

    loss_sum: float
    n_tokens: int
    greedy: bool  # every continuation token is the argmax prediction

    @property
    def mean_loss(self) -> float:
        """Per-token loss in nats."""
        return self.loss_sum / self.n_tokens


def encode_pairs(
    tokenizer: Tokenizer, bos_id: int, pairs: Sequence[tuple[str, str]], max_len: int
) -> list[ScoredSequence]:
    """Tokenise (context, continuation) pairs with the rule of the module docstring.

    ``max_len`` is the model context T: a sequence keeps at most its last T + 1 tokens (T inputs).
    """
    moved = [_move_trailing_space(context, continuation) for context, continuation in pairs]
    contexts = list(dict.fromkeys(context for context, _ in moved))
    context_ids = {text: enc.ids for text, enc in zip(contexts, _encode(tokenizer, contexts))}
    wholes = _encode(tokenizer, [context + continuation for context, continuation in moved])
    sequences = []
    for (context, continuation), whole in zip(moved, wholes):
        tokens = [bos_id, *whole.ids]
        n_continuation = len(whole.ids) - _common_prefix(context_ids[context], whole.ids)
        if n_continuation < 1:
            raise UserError(f"continuation {continuation!r} adds no tokens to its context; check the task")
        if n_continuation > max_len:
            raise UserError(
                f"continuation of {n_continuation} tokens does not fit the model context of {max_len} tokens"
            )
        truncated = len(tokens) - 1 > max_len
        if truncated:
            tokens = tokens[-(max_len + 1):]
        sequences.append(ScoredSequence(tuple(tokens), n_continuation, truncated))
    return sequences


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _move_trailing_space(context: str, continuation: str) -> tuple[str, str]:
    stripped = context.rstrip()
    return stripped, context[len(stripped):] + continuation


def _encode(tokenizer: Tokenizer, texts: list[str]):
    return tokenizer.encode_batch(texts, add_special_tokens=False)


@torch.inference_mode()
def score_sequences(
    sequences: Sequence[ScoredSequence],
    logits_fn: LogitsFn,
    *,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    pad_id: int = 0,
    device: str | torch.device = "cpu",
) -> list[ContinuationScore]:
    """Score every sequence's continuation; batches hold at most ``max_batch_tokens`` input positions
    (at least one sequence). Results come back in input order."""
    if max_batch_tokens < 1:
        raise UserError(f"batch tokens must be >= 1, got {max_batch_tokens}")
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i].tokens))
    scores: list[ContinuationScore | None] = [None] * len(sequences)
    start = 0
    while start < len(order):
        width = len(sequences[order[start]].tokens) - 1
        rows = order[start:start + max(1, max_batch_tokens // width)]
        start += len(rows)
        idx = torch.full((len(rows), width), pad_id, dtype=torch.long)
        targets = torch.full((len(rows), width), -1, dtype=torch.long)
        for b, i in enumerate(rows):
            seq = sequences[i]
            tokens = torch.tensor(seq.tokens, dtype=torch.long)
            n = len(seq.tokens) - 1
            idx[b, :n] = tokens[:-1]
            targets[b, n - seq.n_continuation:n] = tokens[-seq.n_continuation:]
        idx, targets = idx.to(device), targets.to(device)
        scored = targets != -1
        gold = targets[scored]
        logits = logits_fn(idx, scored).float()
        ce = F.cross_entropy(logits, gold, reduction="none").double()
        row = scored.nonzero()[:, 0]
        loss_sums = torch.zeros(len(rows), dtype=torch.float64, device=ce.device).index_add_(0, row, ce)
        misses = torch.zeros(len(rows), dtype=torch.long, device=ce.device)
        misses.index_add_(0, row, (logits.argmax(dim=-1) != gold).long())
        greedy = misses == 0
        for b, (loss_sum, is_greedy) in enumerate(zip(loss_sums.tolist(), greedy.tolist())):
            i = rows[b]
            scores[i] = ContinuationScore(loss_sum, sequences[i].n_continuation, bool(is_greedy))
    return scores  # type: ignore[return-value]


def model_logits_fn(model: torch.nn.Module, r: int | None = None) -> LogitsFn:
    """Logits of a ``LoopedGPT`` at the given positions with ``r`` loops (None: the trained r), in eval
    mode, no cache."""
    model.eval()
    return lambda idx, positions: model.logits_at(idx, positions, r=r)


@dataclass
class TaskResult:
    """One task's evaluation. ``loss``: token-weighted per-token continuation loss in nats."""

    name: str
    axis: str
    type: str
    shots: int  # shots used (fewer than shots_requested when the prompts did not fit)
    n_examples: int
    n_tokens: int  # scored continuation tokens (gold options for MC)
    loss: float
    accuracy: float  # MC: lowest-mean-loss option is gold; LM: greedy exact match
    n_truncated: int  # sequences cut from the left to fit the model context (with ``shots`` shots)
    source: str
    shots_requested: int = 0  # the task's shot count (the paper's for a paper task)
    n_sequences: int = 0  # scored sequences (one per option for MC)
    deviation: str = ""  # how the task's data differ from the paper's ("" = the paper's)
    digest: str = ""  # the task's content hash (Task.digest)

    def to_dict(self) -> dict:
        return dict(vars(self))


def evaluate_task(
    task: Task,
    tokenizer: Tokenizer,
    bos_id: int,
    logits_fn: LogitsFn,
    *,
    max_len: int,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    device: str | torch.device = "cpu",
) -> TaskResult:
    """Score every example of ``task`` (all options of an MC item) and aggregate as method §10.1, with
    fewer shots when the prompts do not fit (module docstring)."""
    shots, owners, sequences = fit_shots(task, tokenizer, bos_id, max_len)
    scores = score_sequences(sequences, logits_fn, max_batch_tokens=max_batch_tokens, pad_id=bos_id,
                             device=device)
    per_example: list[list[ContinuationScore]] = [[] for _ in task.scored]
    for owner, score in zip(owners, scores):
        per_example[owner].append(score)
    loss_sum, n_tokens, correct = 0.0, 0, 0
    for example, options in zip(task.scored, per_example):
        gold = options[example.gold]
        loss_sum += gold.loss_sum
        n_tokens += gold.n_tokens
        if example.choices:
            means = [option.mean_loss for option in options]
            correct += means.index(min(means)) == example.gold
        else:
            correct += gold.greedy
    return TaskResult(
        name=task.name,
        axis=task.meta.axis,
        type=task.meta.type,
        shots=shots,
        n_examples=len(task.scored),
        n_tokens=n_tokens,
        loss=loss_sum / n_tokens,
        accuracy=correct / len(task.scored),
        n_truncated=sum(seq.truncated for seq in sequences),
        source=task.source,
        shots_requested=task.meta.shots,
        n_sequences=len(sequences),
        deviation=task.meta.deviation,
        digest=task.digest,
    )


def fit_shots(
    task: Task, tokenizer: Tokenizer, bos_id: int, max_len: int
) -> tuple[int, list[int], list[ScoredSequence]]:
    """(shots, owning example of each sequence, sequences): the task's shot count, lowered one at a time
    while more than ``MAX_TRUNCATED_FRACTION`` of the sequences would be cut to ``max_len`` tokens."""
    shots = task.meta.shots
    while True:
        owners: list[int] = []  # example index of each scored pair
        pairs: list[tuple[str, str]] = []
        for idx, example in enumerate(task.scored):
            context = render_context(task, idx, shots)
            for option in example.options:
                owners.append(idx)
                pairs.append((context, option))
        try:
            sequences = encode_pairs(tokenizer, bos_id, pairs, max_len)
        except UserError as exc:
            raise UserError(f"task {task.name!r}: {exc}") from None
        cut = sum(seq.truncated for seq in sequences)
        if shots == 0 or cut <= MAX_TRUNCATED_FRACTION * len(sequences):
            return shots, owners, sequences
        shots -= 1
