"""Evaluation speed: tokens/s of `loopscale eval`'s scoring against the training step's, on one model.

Eval is inference: no backward, and only the few continuation positions of each sequence need the
unembedding. The script builds one model (default d = 256, depth 12 = 2 + 8 + 2, head_dim 64, T = 256,
vocabulary 4,096: the shape of benchmarks/train_throughput.py; weights are random, which does not change
the time) and times, on the same machine minutes (interleaved rounds, fastest kept):

  eval, unembed scored     ``evaluate_task`` as ``loopscale eval`` runs it (``LoopedGPT.logits_at``: the
                           lm_head only at scored positions, under ``torch.inference_mode``)
  eval, unembed all        the same tasks through ``forward()``'s full [B, T, vocab] logits, selected
                           afterwards (how scoring ran before issue 10)
  train fwd+bwd            one training step's forward + backward (``accumulate_gradients``, the code path of
                           ``loopscale train``) on 4 × T tokens
  MC, options packed       a multiple-choice task (``--mc-task``, default ARC-Easy from ``loopscale eval
                           prepare``'s data/tasks) as ``loopscale eval`` scores it: each item's options packed
                           after one computed prompt (``score_sequences`` groups)
  MC, options separate     the same sequences, every option with its own copy of the prompt

tokens/s counts input positions (every token of every scored sequence, as if unpacked; the training
step's B·T), so the packed MC row's figure is the work done per second, not the positions computed. The
tasks are the generated reasoning primitives with the project's 4,096-token BPE (the default corpus's
tokenizer; ``--tokenizer``), prompts fitted to T by the shot rule, ``--limit`` items per task.

    .venv/bin/python benchmarks/eval_speed.py --threads 2 --limit 64 --rounds 3

Figures: benchmarks/RESULTS.md ("Evaluation speed").
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

DEFAULT_TOKENIZER = Path("data/tokenizers/default-bpe4096/tokenizer.json")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--r", type=int, default=4)
    p.add_argument("--depth", type=int, default=12)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER,
                   help="a tokenizer.json (its vocabulary size sets the model's)")
    p.add_argument("--tasks", nargs="+", default=["induction_head", "varassign_d0_math", "varassign_d1_code"])
    p.add_argument("--limit", type=int, default=64, help="scored items per task")
    p.add_argument("--batch-tokens", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--mc-task", default="arc_easy", help="a multiple-choice paper task or .jsonl file "
                   "(skipped when its file is absent)")
    p.add_argument("--task-dir", type=Path, default=Path("data/tasks"))
    args = p.parse_args()

    import torch

    from loopscale.config import ModelConfig
    from loopscale.data import find_bos_id, load_tokenizer
    from loopscale.eval.axes import load_tasks
    from loopscale.eval.continuation import (
        evaluate_task,
        fit_shots,
        groups_by,
        model_logits_fn,
        score_sequences,
    )
    from loopscale.model import LoopedGPT
    from loopscale.train.loop import Runtime, accumulate_gradients

    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(args.tokenizer)
    bos = find_bos_id(tokenizer)
    vocab = tokenizer.get_vocab_size()
    cfg = ModelConfig(width=args.width, r=args.r, depth=args.depth, prelude=2, coda=2, head_dim=args.head_dim,
                      vocab_size=vocab, seq_len=args.seq_len, injection="auto")
    torch.manual_seed(0)
    model = LoopedGPT(cfg).eval()
    tasks, _ = load_tasks(args.tasks, None, max_examples=args.limit)
    positions = 0
    for task in tasks:
        shots, _, sequences = fit_shots(task, tokenizer, bos, args.seq_len)
        positions += sum(len(s.tokens) - 1 for s in sequences)
        print(f"{task.name}: {len(sequences)} sequences, {shots}/{task.meta.shots} shots, "
              f"{sum(s.truncated for s in sequences)} cut")

    scored_fn = model_logits_fn(model, args.r)

    def full_fn(idx, where):
        return model(idx, r=args.r)[where]

    def run_eval(fn) -> float:
        t0 = time.perf_counter()
        for task in tasks:
            evaluate_task(task, tokenizer, bos, fn, max_len=args.seq_len, max_batch_tokens=args.batch_tokens)
        return time.perf_counter() - t0

    rt = Runtime(rank=0, world=1, device=torch.device("cpu"), autocast_dtype=None)
    batch = 4
    rows = torch.randint(0, vocab, (batch, args.seq_len + 1))

    def run_train() -> float:
        model.train()
        t0 = time.perf_counter()
        accumulate_gradients(model, model, rows, batch, rt)
        elapsed = time.perf_counter() - t0
        model.zero_grad(set_to_none=True)
        model.eval()
        return elapsed

    jobs = {"eval, unembed scored": (lambda: run_eval(scored_fn), positions),
            "eval, unembed all": (lambda: run_eval(full_fn), positions),
            "train fwd+bwd": (run_train, batch * args.seq_len)}
    mc_tasks, _ = load_tasks([args.mc_task], args.task_dir, max_examples=args.limit)
    if mc_tasks:
        shots, owners, mc_sequences = fit_shots(mc_tasks[0], tokenizer, bos, args.seq_len)
        mc_positions = sum(len(s.tokens) - 1 for s in mc_sequences)
        print(f"{mc_tasks[0].name}: {len(mc_sequences)} sequences, {shots}/{mc_tasks[0].meta.shots} shots, "
              f"{sum(s.truncated for s in mc_sequences)} cut")

        def run_mc(groups) -> float:
            t0 = time.perf_counter()
            score_sequences(mc_sequences, scored_fn, groups=groups, max_batch_tokens=args.batch_tokens,
                            pad_id=bos)
            return time.perf_counter() - t0

        jobs["MC, options packed"] = (lambda: run_mc(groups_by(owners)), mc_positions)
        jobs["MC, options separate"] = (lambda: run_mc(()), mc_positions)
    timings: dict[str, list[float]] = {name: [] for name in jobs}
    run_train()  # warm-up
    for k in range(args.rounds):
        for name in list(jobs) if k % 2 == 0 else reversed(list(jobs)):
            timings[name].append(jobs[name][0]())
    speed = {name: jobs[name][1] / min(times) for name, times in timings.items()}
    train = speed["train fwd+bwd"]
    print(f"d={args.width} r={args.r} T={args.seq_len} vocab={vocab} threads={torch.get_num_threads()} "
          f"rounds={args.rounds} load average after: {os.getloadavg()[0]:.2f}")
    print("| path | tokens/s | vs train fwd+bwd | vs unembed all |")
    print("|---|---|---|---|")
    for name, value in speed.items():
        print(f"| {name} | {value:,.0f} | {value / train:.2f}x | {value / speed['eval, unembed all']:.2f}x |")


if __name__ == "__main__":
    main()
