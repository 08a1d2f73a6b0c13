"""The lm-evaluation-harness adapter on a local-file task, end to end (must-show 4)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval")

from loopscale.eval.continuation import encode_pairs  # noqa: E402
from loopscale.eval.harness import LoopscaleLM  # noqa: E402
from loopscale.eval.suite import EvalModel  # noqa: E402

QA = [("What is the capital of France?", "Paris"), ("How many legs has a cat?", "4"),
      ("What is the value of x?", "25"), ("Which block loops?", "the same block")]


class Request:
    """The part of lm-eval's Instance the adapter reads."""

    def __init__(self, *args):
        self.args = args


def direct_nll(model, tokens, n_cont, r):
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([tokens[:-1]]), r=r)[0].double(), dim=-1)
    return -sum(logp[p - 1, tokens[p]].item() for p in range(len(tokens) - n_cont, len(tokens)))


@pytest.fixture()
def loaded(model_factory, tokenizer, bos_id, tokenizer_path):
    model = model_factory(r=2, seq_len=24)
    return EvalModel(model, tokenizer, bos_id, Path("in-memory"), tokenizer_path, "cpu")


def test_loglikelihood_matches_direct_computation_at_any_r(loaded):
    requests = [Request(f"Question: {q}\nAnswer:", f" {a}") for q, a in QA]
    # a multiple-choice question: one context, four options (packed after one computed prompt)
    requests += [Request("Which block loops?\nAnswer:", f" {a}") for _, a in QA]
    for r in (1, 2, 3):
        lm = LoopscaleLM.from_loaded(loaded, r=r)
        got = lm.loglikelihood(requests)
        for req, (ll, _) in zip(requests, got):
            (seq,) = encode_pairs(loaded.tokenizer, loaded.bos_id, [req.args], 24)
            expected = direct_nll(loaded.model, list(seq.tokens), seq.n_continuation, r)
            assert ll == pytest.approx(-expected, rel=1e-5)


def test_loglikelihood_rolling_windows(loaded):
    lm = LoopscaleLM.from_loaded(loaded)
    short = "The looping model keeps looping."
    ids = loaded.tokenizer.encode(short, add_special_tokens=False).ids
    assert len(ids) < 24
    (ll_short,) = lm.loglikelihood_rolling([Request(short)])
    assert ll_short == pytest.approx(-direct_nll(loaded.model, [loaded.bos_id, *ids], len(ids), 2), rel=1e-5)
    # A 60-token string with T = 24: windows predict tokens 0–23, 24–47, 48–59, each with maximal context.
    text = "The" + " looping" * 59
    long_ids = loaded.tokenizer.encode(text, add_special_tokens=False).ids
    assert len(long_ids) == 60
    expected = direct_nll(loaded.model, [loaded.bos_id, *long_ids[:24]], 24, 2)
    expected += direct_nll(loaded.model, long_ids[23:48], 24, 2)
    expected += direct_nll(loaded.model, long_ids[35:], 12, 2)
    (ll_long,) = lm.loglikelihood_rolling([Request(text)])
    assert ll_long == pytest.approx(-expected, rel=1e-5)


def test_generate_until_is_greedy_with_the_kv_cache(loaded):
    lm = LoopscaleLM.from_loaded(loaded, r=3)
    context = "Question: What is the capital of France?\nAnswer:"
    (text,) = lm.generate_until([Request(context, {"until": ["\n\n"], "max_gen_toks": 6})])
    # independent greedy decode: full forward passes, no cache
    tokens = [loaded.bos_id, *loaded.tokenizer.encode(context, add_special_tokens=False).ids][-(24 - 6):]
    new = []
    with torch.no_grad():
        for _ in range(6):
            nxt = int(loaded.model(torch.tensor([tokens + new]), r=3)[0, -1].argmax())
            new.append(nxt)
    if loaded.bos_id in new:
        new = new[: new.index(loaded.bos_id)]
    expected = loaded.tokenizer.decode(new)
    expected = expected.split("\n\n")[0]
    assert text == expected
    with pytest.raises(Exception, match="greedily"):
        lm.generate_until([Request(context, {"do_sample": True})])


def test_local_file_task_end_to_end(loaded, tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QA))
    cache = tmp_path / "hf-cache"
    common = f"""dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
  cache_dir: {cache}
test_split: test
"""
    (tmp_path / "ll.yaml").write_text(
        "task: loopscale_local_ll\n" + common
        + 'output_type: loglikelihood\ndoc_to_text: "Question: {{question}}\\nAnswer:"\n'
        + 'doc_to_target: " {{answer}}"\nmetric_list:\n  - metric: perplexity\n  - metric: acc\n'
    )
    (tmp_path / "gen.yaml").write_text(
        "task: loopscale_local_gen\n" + common
        + 'output_type: generate_until\ndoc_to_text: "Question: {{question}}\\nAnswer:"\n'
        + 'doc_to_target: " {{answer}}"\ngeneration_kwargs:\n  until: ["\\n"]\n  max_gen_toks: 4\n'
        + "  do_sample: false\nmetric_list:\n  - metric: exact_match\n"
    )
    (tmp_path / "roll.yaml").write_text(
        "task: loopscale_local_rolling\n" + common
        + 'output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{question}} {{answer}}"\n'
        + "metric_list:\n  - metric: word_perplexity\n"
    )
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    old = {k: os.environ.get(k) for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
    os.environ.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    try:
        lm = LoopscaleLM.from_loaded(loaded, r=1)
        out = simple_evaluate(model=lm, tasks=["loopscale_local_ll", "loopscale_local_gen",
                                               "loopscale_local_rolling"],
                              task_manager=TaskManager(include_path=str(tmp_path)), num_fewshot=0)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    results = out["results"]
    # perplexity = exp(−mean per-document log-likelihood), from our own direct computation at r = 1
    pairs = [(f"Question: {q}\nAnswer:", f" {a}") for q, a in QA]
    seqs = encode_pairs(loaded.tokenizer, loaded.bos_id, pairs, 24)
    nll = [direct_nll(loaded.model, list(s.tokens), s.n_continuation, 1) for s in seqs]
    assert results["loopscale_local_ll"]["perplexity,none"] == pytest.approx(math.exp(sum(nll) / len(nll)),
                                                                           rel=1e-4)
    assert 0.0 <= results["loopscale_local_ll"]["acc,none"] <= 1.0
    assert 0.0 <= results["loopscale_local_gen"]["exact_match,none"] <= 1.0
    assert math.isfinite(results["loopscale_local_rolling"]["word_perplexity,none"])


def test_registered_model_loads_a_checkpoint_from_model_args(trained_run):
    from lm_eval.api.registry import get_model

    cls = get_model("loopscale")
    assert cls is LoopscaleLM
    lm = cls.create_from_arg_string(f"checkpoint={trained_run},r=3", {"batch_size": 4, "device": "cpu"})
    assert lm.r == 3 and lm.loaded.r_train == 2 and lm.max_length == 48
    (ll, greedy), = lm.loglikelihood([Request("Question: What is the capital of France?\nAnswer:", " Paris")])
    assert ll < 0 and isinstance(greedy, bool)


def test_generate_until_keeps_half_the_context_and_stops_while_decoding(loaded, monkeypatch):
    lm = LoopscaleLM.from_loaded(loaded)
    calls = []
    generate = loaded.model.generate

    def recording(idx, max_new, **kwargs):
        out = generate(idx, max_new, **kwargs)
        calls.append((idx.size(1), max_new, out.size(1) - idx.size(1)))
        return out

    monkeypatch.setattr(loaded.model, "generate", recording)
    long_context = "The looping model keeps looping over the same block. " * 6
    (free,) = lm.generate_until([Request(long_context, {"until": [], "max_gen_toks": 100})])
    assert calls[-1] == (12, 12, 12)  # T = 24: at most T/2 new tokens, the prompt keeps the last 12
    first = loaded.tokenizer.decode(loaded.tokenizer.encode(free, add_special_tokens=False).ids[:2])
    assert first.strip()
    (text,) = lm.generate_until([Request(long_context, {"until": [first], "max_gen_toks": 100})])
    assert text == free[: free.index(first)] and calls[-1][2] <= 2  # stopped at the stop string


def test_model_generate_stops_when_asked(loaded):
    prompt = torch.tensor([[loaded.bos_id, 5, 6]])
    out = loaded.model.generate(prompt, 10, stop=lambda new: new.size(1) == 3)
    assert out.shape == (1, 6) and torch.equal(out, loaded.model.generate(prompt, 3))
