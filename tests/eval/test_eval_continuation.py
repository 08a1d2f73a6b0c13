"""Continuation loss against a direct computation from the model's logits (must-show 1)."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopscale.errors import UserError
from loopscale.eval.continuation import (
    ScoredSequence,
    encode_pairs,
    evaluate_task,
    model_logits_fn,
    score_sequences,
)
from loopscale.eval.tasks import Example, TaskMeta, fewshot_examples, make_task, render_context


def direct_nll(model, tokens: list[int], n_cont: int, r=None) -> tuple[float, bool]:
    """Σ −log p(token) over the last n_cont tokens, one sequence at a time, via log_softmax + gather."""
    with torch.no_grad():
        logits = model(torch.tensor([tokens[:-1]]), r=r)[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    total, greedy = 0.0, True
    for pos in range(len(tokens) - n_cont, len(tokens)):
        total -= logp[pos - 1, tokens[pos]].item()
        greedy &= int(logits[pos - 1].argmax()) == tokens[pos]
    return total, greedy


def ids(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False).ids


def test_trailing_space_moves_into_the_continuation(tokenizer, bos_id):
    question = "Question: What is the capital of France?\nAnswer:"
    (seq,) = encode_pairs(tokenizer, bos_id, [(question + " ", "Paris")], 96)
    cont = list(seq.tokens[-seq.n_continuation:])
    assert tokenizer.decode(cont) == " Paris"
    assert list(seq.tokens) == [bos_id, *ids(tokenizer, question + " Paris")]
    # the context's own tokens are a prefix: nothing of the context is scored
    context = [bos_id, *ids(tokenizer, question)]
    assert list(seq.tokens[: len(context)]) == context and len(context) + len(cont) == len(seq.tokens)


def test_token_merging_across_the_boundary_is_scored_as_one_token(tokenizer, bos_id):
    # " looping" is one token of the fixture tokenizer, so "The loop" + "ing" merges at the boundary.
    assert len(ids(tokenizer, " looping")) == 1
    assert ids(tokenizer, "The loop") != ids(tokenizer, "The looping")[: len(ids(tokenizer, "The loop"))]
    (seq,) = encode_pairs(tokenizer, bos_id, [("The loop", "ing")], 96)
    assert seq.n_continuation == 1
    assert tokenizer.decode(list(seq.tokens[-1:])) == " looping"
    # lm-eval's count rule would score nothing here (the joint encoding is shorter than the context's)
    assert len(ids(tokenizer, "The looping")) <= len(ids(tokenizer, "The loop"))


def test_loss_equals_direct_computation_multi_token(tokenizer, bos_id, tiny_model):
    pairs = [
        ("Question: What is the capital of France?\nAnswer: ", "Paris is the capital"),
        ("qnjp -> lgf\nkey ->", " val"),
        ("The loop", "ing model keeps looping"),
        ("n=22\nm = n\nWhat is the value of m?\nAnswer:", " 22"),
    ]
    seqs = encode_pairs(tokenizer, bos_id, pairs, 96)
    assert seqs[0].n_continuation > 1 and seqs[2].n_continuation > 1  # multi-token continuations
    scores = score_sequences(seqs, model_logits_fn(tiny_model))
    for seq, score in zip(seqs, scores):
        expected, greedy = direct_nll(tiny_model, list(seq.tokens), seq.n_continuation)
        assert score.loss_sum == pytest.approx(expected, rel=1e-5, abs=1e-5)
        assert score.n_tokens == seq.n_continuation
        assert score.greedy == greedy
        assert score.mean_loss == pytest.approx(expected / seq.n_continuation, rel=1e-5)


def test_model_loss_reduction_none_agrees_with_scoring(tokenizer, bos_id, tiny_model):
    (seq,) = encode_pairs(tokenizer, bos_id, [("Question: How many legs has a cat?\nAnswer: ", "4 legs")], 96)
    tokens = torch.tensor([seq.tokens])
    targets = tokens[:, 1:].clone()
    targets[:, : -seq.n_continuation] = -1
    with torch.no_grad():
        per_token = tiny_model(tokens[:, :-1], targets, reduction="none")
    (score,) = score_sequences([seq], model_logits_fn(tiny_model))
    assert score.loss_sum == pytest.approx(per_token.sum().item(), rel=1e-5)


def test_batched_with_padding_equals_one_by_one(tokenizer, bos_id, tiny_model):
    texts = [("Question: What is the capital of France?\nAnswer: ", "Paris"), ("a ->", " b"),
             ("The looping model keeps", " looping over the same block."), ("qnjp -> lgf\nkey ->", " val")]
    seqs = encode_pairs(tokenizer, bos_id, texts, 96)
    assert len({len(s.tokens) for s in seqs}) >= 3  # different lengths: padding is exercised
    fn = model_logits_fn(tiny_model)
    batched = score_sequences(seqs, fn, max_batch_tokens=10_000)
    single = score_sequences(seqs, fn, max_batch_tokens=1)
    for a, b in zip(batched, single):
        assert a.loss_sum == pytest.approx(b.loss_sum, rel=1e-5, abs=1e-6)
        assert (a.n_tokens, a.greedy) == (b.n_tokens, b.greedy)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.tuples(st.integers(2, 40), st.integers(1, 6)), min_size=1, max_size=6),
    budget=st.integers(1, 200),
    seed=st.integers(0, 2**16),
)
def test_batching_never_changes_scores(tiny_model, lengths, budget, seed):
    rng = random.Random(seed)
    seqs = [ScoredSequence(tuple(rng.randrange(320) for _ in range(n + k)), k) for n, k in lengths]
    fn = model_logits_fn(tiny_model)
    got = score_sequences(seqs, fn, max_batch_tokens=budget)
    for seq, score in zip(seqs, got):
        expected, greedy = direct_nll(tiny_model, list(seq.tokens), seq.n_continuation)
        assert score.loss_sum == pytest.approx(expected, rel=1e-4, abs=1e-4)
        assert score.greedy == greedy


def test_left_truncation_keeps_the_continuation(tokenizer, bos_id, tiny_model):
    context = "The looping model keeps looping over the same block. " * 6
    (full,) = encode_pairs(tokenizer, bos_id, [(context, "Paris")], 10_000)
    (cut,) = encode_pairs(tokenizer, bos_id, [(context, "Paris")], 24)
    assert not full.truncated and cut.truncated
    assert len(cut.tokens) == 25 and cut.tokens == full.tokens[-25:]
    assert cut.n_continuation == full.n_continuation
    (score,) = score_sequences([cut], model_logits_fn(tiny_model))
    assert score.loss_sum == pytest.approx(direct_nll(tiny_model, list(cut.tokens), cut.n_continuation)[0],
                                           rel=1e-5)
    with pytest.raises(UserError, match="does not fit"):
        encode_pairs(tokenizer, bos_id, [("a", " looping" * 30)], 24)


def test_task_loss_is_token_weighted_and_mc_uses_gold_option(tokenizer, bos_id, tiny_model):
    lm = make_task(
        TaskMeta(name="lm", axis="x", shots=1),
        [Example("Question: What is the capital of France?\nAnswer: ", "Paris"),
         Example("The loop", "ing model keeps looping over the same block"),
         Example("key ->", " val")],
    )
    result = evaluate_task(lm, tokenizer, bos_id, model_logits_fn(tiny_model), max_len=96)
    total, tokens, greedy = 0.0, 0, 0
    for idx, example in enumerate(lm.examples):
        (seq,) = encode_pairs(tokenizer, bos_id, [(render_context(lm, idx), example.continuation)], 96)
        nll, g = direct_nll(tiny_model, list(seq.tokens), seq.n_continuation)
        total, tokens, greedy = total + nll, tokens + seq.n_continuation, greedy + g
    assert result.loss == pytest.approx(total / tokens, rel=1e-5)
    assert result.n_tokens == tokens and result.n_examples == 3
    assert result.accuracy == pytest.approx(greedy / 3)

    choices = ("Paris", "the looping model", "4")
    mc = make_task(TaskMeta(name="mc", axis="x", type="mc"),
                   [Example("Question: What is the capital of France?\nAnswer:", choices[g], choices, g)
                    for g in range(3)])
    result = evaluate_task(mc, tokenizer, bos_id, model_logits_fn(tiny_model), max_len=96)
    total, tokens, correct = 0.0, 0, 0
    for idx, example in enumerate(mc.examples):
        means, sums = [], []
        for option in example.choices:
            (seq,) = encode_pairs(tokenizer, bos_id, [(render_context(mc, idx), option)], 96)
            nll, _ = direct_nll(tiny_model, list(seq.tokens), seq.n_continuation)
            means.append(nll / seq.n_continuation)
            sums.append((nll, seq.n_continuation))
        total += sums[example.gold][0]
        tokens += sums[example.gold][1]
        correct += min(range(3), key=means.__getitem__) == example.gold
    assert result.loss == pytest.approx(total / tokens, rel=1e-5)
    assert result.accuracy == pytest.approx(correct / 3)
    assert 0 < correct < 3  # the same context with three golds: exactly one argmin, so accuracy is 1/3
    assert correct == 1


def test_prompts_are_identical_for_every_r(tokenizer, bos_id, model_factory):
    model = model_factory(r=2)
    task = make_task(TaskMeta(name="t", axis="x", shots=2),
                     [Example(f"Question: {i} legs?\nAnswer: ", str(i)) for i in range(6)])
    seen = {}
    for r in (1, 2, 4):
        calls: list[torch.Tensor] = []

        def logits_fn(idx, positions, r=r, calls=calls):
            calls.append(idx.clone())
            return model.logits_at(idx, positions, r=r)

        seen[r] = (calls, evaluate_task(task, tokenizer, bos_id, logits_fn, max_len=96).loss)
    for r in (2, 4):
        assert all(torch.equal(a, b) for a, b in zip(seen[1][0], seen[r][0]))
    assert len({round(loss, 6) for _, loss in seen.values()}) == 3


def test_fewshot_draw_follows_the_protocol():
    examples = [Example(f"q{i}", f"a{i}") for i in range(30)]
    task = make_task(TaskMeta(name="t", shots=5), examples)
    for idx in range(len(task.examples)):
        shots = fewshot_examples(task, idx)
        others = [i for i in range(30) if i != idx]
        expected = [task.examples[i] for i in random.Random(1234 + idx).sample(others, 5)]
        assert shots == expected and task.examples[idx] not in shots and len(set(shots)) == 5
    # shuffled with seed 1337 before anything else
    order = list(examples)
    random.Random(1337).shuffle(order)
    assert task.examples == order


def test_cap_at_ten_thousand_after_shuffle():
    examples = [Example(f"q{i}", f"a{i}") for i in range(10_050)]
    task = make_task(TaskMeta(name="big"), examples)
    order = list(examples)
    random.Random(1337).shuffle(order)
    assert task.examples == task.scored == order[:10_000]
    quick = make_task(TaskMeta(name="big", shots=3), examples, max_examples=7)
    assert quick.scored == order[:7]
    # a quick run scores a prefix with the very prompts of the full run
    full = make_task(TaskMeta(name="big", shots=3), examples)
    assert [render_context(quick, i) for i in range(7)] == [render_context(full, i) for i in range(7)]


def test_rendered_prompt_format():
    task = make_task(TaskMeta(name="t", shots=1),
                     [Example("Question: A?\nAnswer: ", "x"), Example("Question: B?\nAnswer: ", "y")])
    text = render_context(task, 0)
    other = task.examples[1]
    assert text == f"{other.context.strip()} {other.continuation}\n\n{task.examples[0].context.strip()} "


def test_mean_loss_is_finite_for_uniform_model(tokenizer, bos_id):
    # A model with constant logits gives exactly log(V) nats per token.
    def uniform(idx, positions):
        return torch.zeros(int(positions.sum()), 320)

    task = make_task(TaskMeta(name="u"), [Example("Question: What?\nAnswer: ", "Paris is")])
    result = evaluate_task(task, tokenizer, bos_id, uniform, max_len=96)
    assert result.loss == pytest.approx(math.log(320), rel=1e-6)


def test_logits_at_equals_the_full_forward_at_those_positions(tiny_model):
    idx = torch.randint(0, 320, (3, 20), generator=torch.Generator().manual_seed(0))
    positions = torch.zeros(3, 20, dtype=torch.bool)
    positions[0, 5:9] = positions[2, 19] = True
    for r in (1, 3):
        with torch.no_grad():
            assert torch.allclose(tiny_model.logits_at(idx, positions, r=r), tiny_model(idx, r=r)[positions],
                                  atol=1e-5)


def test_shots_are_reduced_until_at_most_ten_percent_of_prompts_are_cut(tokenizer, bos_id, model_factory):
    rng = random.Random(0)
    words = ["loop", "model", "block", "same", "keeps"]
    examples = [Example("Question: " + " ".join(rng.choices(words, k=rng.randint(2, 6))) + "?\nAnswer: ",
                        str(i)) for i in range(20)]
    task = make_task(TaskMeta(name="long", shots=5), examples)
    model = model_factory(seq_len=256)
    result = evaluate_task(task, tokenizer, bos_id, model_logits_fn(model), max_len=90)
    assert result.shots_requested == 5 and result.shots == 2
    assert result.n_sequences == 20 and result.n_truncated == 1

    def cut(shots):
        pairs = [(render_context(task, i, shots), e.continuation) for i, e in enumerate(task.scored)]
        return sum(s.truncated for s in encode_pairs(tokenizer, bos_id, pairs, 90))

    assert cut(3) > 2 and cut(2) == 1  # 2 is the most shots with at most 10% of the prompts cut
    roomy = evaluate_task(task, tokenizer, bos_id, model_logits_fn(model), max_len=256)
    assert roomy.shots == 5 and roomy.n_truncated == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompts=st.lists(st.integers(1, 40), min_size=1, max_size=4),  # shared prompt length per item
    options=st.lists(st.lists(st.integers(1, 12), min_size=2, max_size=5), min_size=4, max_size=4),
    budget=st.sampled_from([1, 60, 100_000]),
    seed=st.integers(0, 2**16),
)
def test_packed_options_score_like_separate_sequences(tiny_model, prompts, options, budget, seed):
    """A group packed into one row (prompt once, each option attending to it and to itself) gives every
    option the loss and greedy flag it has when scored alone, whatever the lengths and batch budget;
    an option may share leading tokens with another, and a truncated group is scored unpacked."""
    rng = random.Random(seed)
    sequences, groups = [], []
    for n_prompt, lengths in zip(prompts, options):
        prompt = [0, *(rng.randrange(1, 320) for _ in range(n_prompt))]
        common = [rng.randrange(1, 320)] if rng.random() < 0.5 else []  # options may share their start
        group = []
        for n in lengths:
            tail = common + [rng.randrange(1, 320) for _ in range(n)]
            group.append(len(sequences))
            sequences.append(ScoredSequence(tuple(prompt + tail), len(tail), len(prompt) + len(tail) > 60))
        groups.append(group)
    fn = model_logits_fn(tiny_model)
    packed = score_sequences(sequences, fn, groups=groups, max_batch_tokens=budget)
    alone = score_sequences(sequences, fn, max_batch_tokens=budget)
    for a, b in zip(packed, alone):
        assert a.loss_sum == pytest.approx(b.loss_sum, rel=1e-5, abs=1e-6)
        assert (a.n_tokens, a.greedy) == (b.n_tokens, b.greedy)


def test_multiple_choice_prompt_is_computed_once(tokenizer, bos_id, tiny_model):
    """An MC item's shared prompt runs through the model once, not once per option."""
    prompt = "Question: What is the capital of France? The looping model keeps looping.\nAnswer:"
    mc = make_task(TaskMeta(name="mc", type="mc"),
                   [Example(prompt, " Paris", choices=(" Paris", " 4", " val"), gold=0)])
    seen: list[int] = []

    def counting(idx, positions, **packing):
        seen.append(idx.numel())
        return tiny_model.logits_at(idx, positions, **packing)

    result = evaluate_task(mc, tokenizer, bos_id, counting, max_len=96)
    n_prompt = 1 + len(ids(tokenizer, prompt))  # BOS + prompt
    # inputs per option
    lengths = [n_prompt + len(ids(tokenizer, prompt + c)) - len(ids(tokenizer, prompt)) - 1
               for c in mc.scored[0].choices]
    assert len(seen) == 1  # one row holds the three options
    # the prompt (all but at most its last token, which may merge with an option) is computed once
    assert max(lengths) < seen[0] <= sum(lengths) - 2 * (n_prompt - 1)
    assert result.n_examples == 1 and math.isfinite(result.loss)


def test_standard_error_of_the_token_weighted_loss():
    """One token per example: the ratio estimator's SE is the sample standard deviation / sqrt(m);
    with unequal lengths it matches a large bootstrap over examples."""
    import statistics

    from loopscale.eval.axes import summarize
    from loopscale.eval.continuation import ContinuationScore, TaskResult, ratio_standard_error

    losses = [2.0, 3.5, 1.25, 4.0, 2.75]
    scores = [ContinuationScore(x, 1, False) for x in losses]
    assert ratio_standard_error(scores) == pytest.approx(statistics.stdev(losses) / math.sqrt(5))
    assert ratio_standard_error(scores[:1]) is None
    rng = random.Random(0)
    lengths = [rng.randint(1, 9) for _ in range(40)]
    uneven = [ContinuationScore(rng.uniform(0, 10) * n, n, False) for n in lengths]
    boot = []
    for _ in range(4000):
        draw = [rng.choice(uneven) for _ in uneven]
        boot.append(sum(s.loss_sum for s in draw) / sum(s.n_tokens for s in draw))
    assert ratio_standard_error(uneven) == pytest.approx(statistics.stdev(boot), rel=0.1)
    # an axis is the mean of its tasks: SE = sqrt(Σ se²) / k; unknown if any task's is unknown
    def result(name, se):
        return TaskResult(name, "ax", "lm", 0, 5, 5, 1.0, 0.0, 0, "x", loss_se=se)

    summary = summarize([result("a", 0.3), result("b", 0.4)])
    assert summary["axes"]["ax"]["loss_se"] == pytest.approx(0.25)
    assert summary["macro_loss_se"] == pytest.approx(0.25)
    assert summarize([result("a", 0.3), result("b", None)])["axes"]["ax"]["loss_se"] is None
