"""A trainer that is not loopscale's: Hugging Face ``transformers.Trainer`` on the exported model code,
honouring loopscale's run contract (docs/contract.md).

    loopscale sweep SPEC --out DIR --trainer 'python examples/trainers/hf_trainer.py {run_dir}'
    loopscale price RECIPE --reuse BASE --trainer 'python examples/trainers/hf_trainer.py {run_dir}'

What it does with one run folder:
- reads ``run.json`` (steps, batch tokens, seed, learning rates, model) and ``run.yaml`` (the data);
- builds ``LoopscaleForCausalLM`` (the modeling code ``loopscale export`` ships) from the run's model,
  freshly initialised, and trains it with ``transformers.Trainer`` for exactly ``steps`` optimiser steps of
  ``batch_tokens / seq_len`` packed rows each, with AdamW over every parameter (loopscale trains the matrices
  with MuonH; this trainer gives them the rate loopscale's own "adamw" recipe would: the transfer rules of
  ``loopscale.train.optim``), warm-up over the first 1% of steps and a linear decay to 10%;
- appends the training loss to ``metrics.jsonl`` as it logs it, checkpoints under ``{run_dir}/hf`` and resumes
  from the latest checkpoint when rerun (a SIGTERM ends it with exit 128 + 15: preempted);
- writes ``result.json``: the validation loss over the run's ``val_tokens`` targets of the "val" split (nats
  per token, every target of a row predicted from the tokens before it), the tokens trained, FLOPs per token
  under loopscale's accounting, and n_once / n_rec counted from the model's own modules.

Not implemented (refused with one line and exit 2): truncated BPTT and recipes that change training rather
than the model (sampled depth, loop curricula). Needs ``pip install 'loopscale[hf]'`` (transformers).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from loopscale.accounting import flops_per_token
from loopscale.config import ModelConfig, from_dict, load_yaml
from loopscale.data import PackedDataset
from loopscale.export.configuration_loopscale import LoopscaleConfig
from loopscale.export.modeling_loopscale import LoopscaleForCausalLM
from loopscale.train.config import TrainConfig
from loopscale.train.optim import peak_learning_rates

EVAL_ROWS = 16  # validation rows per forward pass


def refuse(message: str) -> None:
    print(f"hf_trainer.py: {message}", file=sys.stderr)
    sys.exit(2)


def build_model(model: ModelConfig) -> LoopscaleForCausalLM:
    """A freshly initialised exported model with loopscale's layout of ``model``."""
    lay = model.layout()
    config = LoopscaleConfig(
        width=model.width, depth=model.depth, r=lay.r, r_train=lay.r, prelude=lay.prelude, coda=lay.coda,
        rec_layers=lay.rec_layers, head_dim=model.head_dim, injection=lay.injection, hc_lanes=model.hc_lanes,
        vocab_size=model.vocab_size, padded_vocab_size=model.padded_vocab, seq_len=model.seq_len,
        softcap=model.softcap, norm_eps=model.norm_eps, rope_theta=model.rope_theta,
    )  # fmt: skip
    return LoopscaleForCausalLM(config)


def count_n(model: LoopscaleForCausalLM) -> tuple[int, int]:
    """(n_once, n_rec) counted from the modules: what runs once per token (prelude, coda, the three
    model-level norm gains) and what runs in every loop (the shared block, the injection, the
    hyperconnection scalars); embeddings and the unembedding are not counted (loopscale's accounting)."""
    inner = model.model
    once = [inner.prelude, inner.coda, inner.norm_emb, inner.norm_recur, inner.norm_final]
    n_once = sum(p.numel() for module in once for p in module.parameters())
    rec = [p for p in inner.recur.parameters()]
    rec += list(inner.inject.parameters()) if inner.inject is not None else []
    rec += [p for p in (inner.hc_alpha, inner.hc_mix, inner.hc_beta) if p is not None]
    return n_once, sum(p.numel() for p in rec)


class Rows(torch.utils.data.Dataset):
    """The training split's packed rows (T + 1 tokens each), as many as the run's steps need."""

    def __init__(self, data: PackedDataset, count: int):
        self.data, self.count = data, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> dict:
        return {"row": torch.from_numpy(self.data.rows("train", i, 1)[0])}


class NextToken(Trainer):
    """Every target of a row predicted from the tokens before it (T targets per row, as loopscale counts
    tokens), not the T − 1 of the model's own shifted loss."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        row = inputs["row"]
        logits = model(input_ids=row[:, :-1]).logits
        loss = F.cross_entropy(logits.flatten(0, 1), row[:, 1:].flatten())
        return (loss, logits) if return_outputs else loss


class Metrics(TrainerCallback):
    """Append each logged training loss to the run's metrics.jsonl (step, loss in nats per token)."""

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            with open(self.path, "a") as fh:
                fh.write(json.dumps({"step": state.global_step, "loss": float(logs["loss"])}) + "\n")


@torch.no_grad()
def validation_loss(model, data: PackedDataset, val_tokens: int, seq_len: int) -> float:
    """Mean next-token cross-entropy (nats per token) over the first ``val_tokens`` targets of "val"."""
    model.eval()
    rows = -(-val_tokens // seq_len)  # as loopscale measures it: ceil(val_tokens / T) rows
    total, count = 0.0, 0
    for start in range(0, rows, EVAL_ROWS):
        batch = torch.from_numpy(data.rows("val", start, min(EVAL_ROWS, rows - start)))
        logits = model(input_ids=batch[:, :-1]).logits
        total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
        count += batch[:, 1:].numel()
    return total / count


def optimizer(model, rates: dict, matrix_lr: float, steps: int):
    """AdamW with loopscale's per-group peak rates (W_inj in "matrix", as loopscale groups it), warm-up over
    1% of the steps, linear decay to 10%."""
    inner = model.model
    groups = {"embed": list(inner.wte.parameters()), "unembed": list(model.lm_head.parameters())}
    groups["hc"] = [p for p in (inner.hc_alpha, inner.hc_mix, inner.hc_beta) if p is not None]
    # W_inj (linear injection) is a matrix: loopscale trains it with the block matrices (model.param_groups);
    # its "injection" rate is Parcae's, which the exported model does not implement
    seen = {id(p) for ps in groups.values() for p in ps}
    rest = [(n, p) for n, p in model.named_parameters() if id(p) not in seen]
    groups["norm"] = [p for _, p in rest if p.ndim == 1]
    groups["matrix"] = [p for _, p in rest if p.ndim > 1]
    lrs = {**rates, "matrix": matrix_lr}
    params = [{"params": ps, "lr": lrs[name]} for name, ps in groups.items() if ps]
    opt = torch.optim.AdamW(params, betas=(0.9, 0.95), weight_decay=0.0)
    warm = max(1, steps // 100)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: min(1.0, (step + 1) / warm) * (1 - 0.9 * min(step, steps) / steps)
    )
    return opt, schedule


def main(run_dir: Path) -> None:
    started = time.perf_counter()
    plan = json.loads((run_dir / "run.json").read_text())
    cfg = from_dict(TrainConfig, load_yaml(run_dir / "run.yaml"), "run.yaml")
    if plan["bptt_k"] < plan["r"]:
        refuse(f"run {plan['run']}: truncated BPTT (k = {plan['bptt_k']} of {plan['r']}) is not implemented")
    if plan["recipe"].get("train"):
        refuse(f"run {plan['run']}: the recipe changes training ({plan['recipe']['train']}), not the model")
    model_cfg, seq_len = cfg.model, cfg.model.seq_len
    rows_per_step = plan["batch_tokens"] // seq_len
    if rows_per_step * seq_len != plan["batch_tokens"]:
        refuse(f"batch_tokens {plan['batch_tokens']} is not a whole number of {seq_len}-token rows")
    torch.manual_seed(plan["seed"])
    model = build_model(model_cfg)
    n_once, n_rec = count_n(model)
    data = PackedDataset(cfg.data.path)
    adamw = dataclasses.replace(cfg.optim, recipe="adamw")  # the matrix rate of loopscale's AdamW recipe
    matrix_lr = peak_learning_rates(adamw, model_cfg, plan["batch_tokens"], plan["tokens"])["matrix"]
    args = TrainingArguments(
        output_dir=str(run_dir / "hf"),
        max_steps=plan["steps"],
        per_device_train_batch_size=rows_per_step,
        seed=plan["seed"],
        logging_steps=max(1, plan["steps"] // 50),
        save_strategy="steps",
        save_steps=max(1, plan["steps"] // 4),
        save_total_limit=1,
        report_to="none",
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = NextToken(
        model=model,
        args=args,
        train_dataset=Rows(data, plan["steps"] * rows_per_step),
        optimizers=optimizer(model, plan["learning_rates"], matrix_lr, plan["steps"]),
        callbacks=[Metrics(run_dir / "metrics.jsonl")],
    )
    trainer.train(resume_from_checkpoint=get_last_checkpoint(args.output_dir))
    val_tokens = cfg.data.val_tokens or data.num_rows("val") * seq_len
    loss = validation_loss(model.cpu() if args.use_cpu else model, data, val_tokens, seq_len)
    tokens = trainer.state.global_step * plan["batch_tokens"]
    result = {
        "status": "ok" if math.isfinite(loss) else "failed",
        "reason": None if math.isfinite(loss) else f"non-finite validation loss ({loss})",
        "val_loss": loss if math.isfinite(loss) else None,
        "val_loss_unit": "nats_per_token",
        "tokens": tokens,
        "flops_per_token": flops_per_token(model_cfg),
        "n_once": n_once,
        "n_rec": n_rec,
        "wall_time_s": time.perf_counter() - started,  # this process only (a resumed run: its last part)
        "trainer": f"transformers.Trainer {__import__('transformers').__version__}, AdamW",
    }
    tmp = run_dir / "result.json.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(run_dir / "result.json")  # atomic: a result is whole or absent


if __name__ == "__main__":
    if len(sys.argv) != 2:
        refuse("usage: hf_trainer.py RUN_DIR (a run folder loopscale wrote, with run.json)")
    main(Path(sys.argv[1]))
