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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from loopscale.errors import UserError
from loopscale.eval.tasks import Task, render_context

# (idx [B, T] int64, positions [B, T] bool) → fp32 logits [n, vocab] at the n True positions, row-major.
# For packed rows (``score_sequences``' groups) it is also given keyword arguments ``token_pos`` [B, T]
# (RoPE positions) and ``attn_mask`` [B, T, T] (bool, True = attend), as ``LoopedGPT.logits_at`` takes.
LogitsFn = Callable[..., torch.Tensor]
DEFAULT_BATCH_TOKENS = 8192
MAX_TRUNCATED_FRACTION = 0.10  # above this share of cut sequences a task is scored with fewer shots


@dataclass(frozen=True)
class ScoredSequence:
    """Token ids ``BOS + context + continuation`` (left-truncated); the last ``n_continuation`` are scored."""

    tokens: tuple[int, ...]
    n_continuation: int
    truncated: bool = False


def ratio_standard_error(scores: Sequence[ContinuationScore]) -> float | None:
    """Standard error (nats) of the token-weighted loss Σ loss_sum / Σ n_tokens over examples drawn at
    random from a larger pool: the ratio estimator's, sqrt(m/(m−1) · Σ (s_i − L·n_i)²) / Σ n_i, which
    counts an example's tokens as one draw (they are not independent). None for fewer than 2 examples."""
    m = len(scores)
    if m < 2:
        return None
    total = sum(s.n_tokens for s in scores)
    mean = sum(s.loss_sum for s in scores) / total
    spread = sum((s.loss_sum - mean * s.n_tokens) ** 2 for s in scores)
    return math.sqrt(m / (m - 1) * spread) / total


# (shots used, owning example of each sequence, the sequences): what ``fit_shots`` returns
PreparedTask = tuple[int, list[int], list[ScoredSequence]]


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


@dataclass
class _Row:
    """One row of a batch: input token ids, and the (position, gold token, sequence index) it scores.
    A packed row is a shared prompt (its first ``shared`` inputs) followed by the remaining inputs of
    each sequence of a group, ``segments`` giving each one's (start, end) in the row."""

    inputs: list[int]
    targets: list[tuple[int, int, int]]
    shared: int = 0
    segments: tuple[tuple[int, int], ...] = ()


def _rows(sequences: Sequence[ScoredSequence], groups: Sequence[Sequence[int]]) -> list[_Row]:
    """One row per sequence, except that each group of ≥ 2 untruncated sequences whose inputs share more
    than the BOS token becomes one packed row (the prompt computed once)."""
    rows, packed = [], set()
    for group in groups:
        members = [sequences[i] for i in group]
        if len(group) < 2 or any(seq.truncated for seq in members):
            continue
        inputs = [list(seq.tokens[:-1]) for seq in members]
        shared = min(len(x) for x in inputs)
        for x in inputs[1:]:
            shared = min(shared, _common_prefix(inputs[0], x))
        if shared <= 1:
            continue
        row = _Row(list(inputs[0][:shared]), [], shared)
        segments = []
        for i, seq, x in zip(group, members, inputs):
            offset = len(row.inputs) - shared  # row index of input position p >= shared is p + offset
            row.inputs += x[shared:]
            segments.append((shared + offset, len(row.inputs)))
            first = len(x) - seq.n_continuation
            row.targets += [(p if p < shared else p + offset, seq.tokens[p + 1], i)
                            for p in range(first, len(x))]
        row.segments = tuple(segments)
        rows.append(row)
        packed.update(group)
    for i, seq in enumerate(sequences):
        if i not in packed:
            n = len(seq.tokens) - 1
            rows.append(_Row(list(seq.tokens[:-1]),
                             [(p, seq.tokens[p + 1], i) for p in range(n - seq.n_continuation, n)]))
    return rows


def groups_by(keys: Sequence) -> list[list[int]]:
    """Indices of equal keys, grouped (first-seen order): e.g. the options of one multiple-choice item."""
    groups: dict = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return list(groups.values())


@torch.inference_mode()
def score_sequences(
    sequences: Sequence[ScoredSequence],
    logits_fn: LogitsFn,
    *,
    groups: Sequence[Sequence[int]] = (),
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    pad_id: int = 0,
    device: str | torch.device = "cpu",
) -> list[ContinuationScore]:
    """Score every sequence's continuation; batches hold at most ``max_batch_tokens`` input positions
    (at least one row). Results come back in input order.

    ``groups``: lists of indices of sequences that share their prompt (a multiple-choice item's
    options). Such a group is packed into one row, the prompt once and each option after it attending to
    the prompt and to itself (``LogitsFn``'s ``token_pos`` and ``attn_mask``), so the prompt is computed
    once instead of once per option; the scores equal the unpacked ones to float round-off."""
    if max_batch_tokens < 1:
        raise UserError(f"batch tokens must be >= 1, got {max_batch_tokens}")
    rows = _rows(sequences, groups)
    # packed rows batch with packed rows (they need a mask), the rest run on the causal fast path
    order = sorted(range(len(rows)), key=lambda i: (bool(rows[i].segments), -len(rows[i].inputs)))
    loss_sums = torch.zeros(len(sequences), dtype=torch.float64)
    misses = torch.zeros(len(sequences), dtype=torch.long)
    start = 0
    while start < len(order):
        first = rows[order[start]]
        width = len(first.inputs)
        batch = [rows[i] for i in order[start:start + max(1, max_batch_tokens // width)]
                 if bool(rows[i].segments) == bool(first.segments)]
        start += len(batch)
        idx = torch.full((len(batch), width), pad_id, dtype=torch.long)
        scored = torch.zeros((len(batch), width), dtype=torch.bool)
        for b, row in enumerate(batch):
            idx[b, :len(row.inputs)] = torch.tensor(row.inputs, dtype=torch.long)
            scored[b, [p for p, _, _ in row.targets]] = True
        where = torch.tensor([(b, p) for b, row in enumerate(batch) for p, _, _ in row.targets]).T
        gold = torch.tensor([g for row in batch for _, g, _ in row.targets], dtype=torch.long)
        owner = torch.tensor([i for row in batch for _, _, i in row.targets], dtype=torch.long)
        logit_row = (scored.flatten().cumsum(0) - 1).view_as(scored)[where[0], where[1]]
        if first.segments:
            token_pos, attn_mask = _packing(batch, width)
            logits = logits_fn(idx.to(device), scored.to(device), token_pos=token_pos.to(device),
                               attn_mask=attn_mask.to(device))
        else:
            logits = logits_fn(idx.to(device), scored.to(device))
        logits = logits.float()[logit_row.to(logits.device)]
        gold = gold.to(logits.device)
        ce = F.cross_entropy(logits, gold, reduction="none").double().cpu()
        loss_sums.index_add_(0, owner, ce)
        misses.index_add_(0, owner, (logits.argmax(dim=-1) != gold).long().cpu())
    return [ContinuationScore(float(loss), seq.n_continuation, bool(miss == 0))
            for loss, miss, seq in zip(loss_sums.tolist(), misses.tolist(), sequences)]


def _packing(batch: list[_Row], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE positions [B, W] and attention mask [B, W, W] (True = attend) of packed rows: the shared
    prompt is causal; each segment sees the prompt and its own earlier tokens; padding (segment −1)
    sees the prompt and earlier padding, so no softmax row is empty."""
    token_pos = torch.zeros((len(batch), width), dtype=torch.long)
    segment = torch.full((len(batch), width), -1, dtype=torch.long)
    for b, row in enumerate(batch):
        token_pos[b, :row.shared] = torch.arange(row.shared)
        segment[b, :row.shared] = 0
        for k, (lo, hi) in enumerate(row.segments, start=1):
            token_pos[b, lo:hi] = torch.arange(row.shared, row.shared + hi - lo)
            segment[b, lo:hi] = k
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    same = (segment.unsqueeze(2) == segment.unsqueeze(1)) | (segment.unsqueeze(1) == 0)
    return token_pos, causal & same


def model_logits_fn(model: torch.nn.Module, r: int | None = None) -> LogitsFn:
    """Logits of a ``LoopedGPT`` at the given positions with ``r`` loops (None: the trained r), in eval
    mode, no cache."""
    model.eval()
    return lambda idx, positions, **packing: model.logits_at(idx, positions, r=r, **packing)


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
    loss_se: float | None = None  # standard error of ``loss`` over the sampled examples (nats; None: unknown)

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
    prepared: PreparedTask | None = None,
) -> TaskResult:
    """Score every example of ``task`` (all options of an MC item) and aggregate as method §10.1, with
    fewer shots when the prompts do not fit (module docstring). ``prepared``: ``fit_shots``'s result for
    this task, tokenizer and ``max_len`` when the caller already has it (``eval-sweep`` tokenises each
    task once for all runs that share a tokenizer and context)."""
    shots, owners, sequences = prepared or fit_shots(task, tokenizer, bos_id, max_len)
    scores = score_sequences(sequences, logits_fn, groups=groups_by(owners) if task.meta.type == "mc" else (),
                             max_batch_tokens=max_batch_tokens, pad_id=bos_id, device=device)
    per_example: list[list[ContinuationScore]] = [[] for _ in task.scored]
    for owner, score in zip(owners, scores):
        per_example[owner].append(score)
    loss_sum, n_tokens, correct = 0.0, 0, 0
    golds = []
    for example, options in zip(task.scored, per_example):
        gold = options[example.gold]
        golds.append(gold)
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
        loss_se=ratio_standard_error(golds),
        accuracy=correct / len(task.scored),
        n_truncated=sum(seq.truncated for seq in sequences),
        source=task.source,
        shots_requested=task.meta.shots,
        n_sequences=len(sequences),
        deviation=task.meta.deviation,
        digest=task.digest,
    )


def fit_shots(task: Task, tokenizer: Tokenizer, bos_id: int, max_len: int) -> PreparedTask:
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
