"""The model card (``README.md``) of an exported folder: architecture, N / N_once / N_rec and FLOPs per token
(``loopscale.accounting``), the training budget, tokens and final validation loss (the run's result.json),
and the sweep the run came from with its φ and law-check verdict when the sweep holds a ``fit.json``.

Published text: every path in it is relative to the exported folder (or a bare folder name), never a
machine's absolute path."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from loopscale.accounting import count_params, flops_per_token
from loopscale.config import load_yaml
from loopscale.errors import UserError
from loopscale.fit.results import law_check_in
from loopscale.present.law_check import law_headline
from loopscale.present.numbers import interval
from loopscale.published import path_from, relative_text

FRONT_MATTER = """---
library_name: transformers
pipeline_tag: text-generation
tags:
- loopscale
- looped-transformer
- depth-recurrence
---
"""


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def sweep_of(run: Path) -> Path | None:
    """The sweep folder a run folder belongs to (``SWEEP/runs/NAME`` with ``SWEEP/sweep.yaml``), else None."""
    run = run.resolve()
    root = run.parent.parent
    if run.parent.name == "runs" and (root / "sweep.yaml").is_file():
        return root
    return None


def model_card(source, train_cfg, out: Path) -> str:
    """README.md text of the folder ``out`` exported from ``source`` (hf.Source) with config ``train_cfg``."""
    m = train_cfg.model
    lay = m.layout()
    counts = count_params(m)
    run = Path(source.run)
    result = read_json(run / "result.json")
    name = out.name
    lanes = f" ({m.hc_lanes} lanes)" if lay.injection == "hyperconnect" else ""
    lines = [FRONT_MATTER, f"# {run.name}: a looped transformer trained with loopscale", ""]
    lines += [
        f"A depth-recurrent transformer: a prelude of {lay.prelude} block(s), a shared block of "
        f"{lay.rec_layers} layer(s) applied r = {lay.r} times, and a coda of {lay.coda} block(s) "
        f"({lay.injection} injection); effective depth {lay.effective_depth}. The forward pass is "
        "loopscale's `LoopedGPT`, re-implemented in `modeling_loopscale.py` (torch and transformers only).",
        "",
        "## Architecture",
        "",
        "| | |",
        "|---|---|",
        f"| width d, heads × head dim | {m.width}, {m.n_head} × {m.head_dim} |",
        f"| layout | prelude {lay.prelude} + {lay.r} × {lay.rec_layers} recurrent + coda {lay.coda} "
        f"= {lay.effective_depth} layer applications |",
        f"| injection | {lay.injection}{lanes} |",
        f"| vocabulary (padded) | {m.vocab_size:,} ({m.padded_vocab:,}) |",
        f"| context T | {m.seq_len:,} tokens |",
        f"| logit soft cap, RMSNorm ε, RoPE θ | {m.softcap:g}, {m.norm_eps:g}, {m.rope_theta:g} |",
        "",
        "## Parameters and FLOPs (loopscale.accounting)",
        "",
        "| | |",
        "|---|---|",
        f"| N, non-embedding parameters | {counts.n:,} |",
        f"| N_once, applied once per token | {counts.n_once:,} |",
        f"| N_rec, applied r times per token | {counts.n_rec:,} |",
        f"| embedding + unembedding | {counts.n_embed:,} |",
        f"| FLOPs per token, training (forward + backward) | {flops_per_token(m):,} |",
        f"| FLOPs per token, forward only | {flops_per_token(m, training=False):,} |",
        "",
    ]
    lines += _training(source, train_cfg, result, out)
    lines += _sweep(run, out)
    lines += _usage(name, lay)
    return "\n".join(lines).rstrip() + "\n"


def _training(source, train_cfg, result: dict | None, out: Path) -> list[str]:
    lines = ["## Training", "", "| | |", "|---|---|"]
    budget = (result or {}).get("budget", train_cfg.budget)
    if budget is not None:
        lines.append(f"| compute budget C | {float(budget):.3g} FLOPs |")
    if result is not None and result.get("tokens") is not None:
        lines.append(f"| tokens D | {int(result['tokens']):,} ({int(result['steps']):,} steps of "
                     f"{int(result['batch_tokens']):,} tokens) |")
    data = Path(str(train_cfg.data.path)).name
    lines.append(f"| data set | `{data}` |")
    if source.step is not None:
        lines.append(f"| weights | checkpoint at step {source.step:,} (the run had not finished) |")
    status = (result or {}).get("status")
    val = (result or {}).get("val_loss")
    if source.step is None and status == "ok" and isinstance(val, int | float) and math.isfinite(val):
        lines.append(f"| final validation loss | {val:.4f} nats/token over {int(result['val_tokens']):,} "
                     "validation tokens |")
    elif status == "failed":
        reason = relative_text(str(result.get("reason") or "no reason recorded"), out)
        lines.append(f"| status | failed: {reason} |")
    else:
        lines.append("| final validation loss | none yet (run not finished) |")
    return lines + [""]


def _sweep(run: Path, out: Path) -> list[str]:
    root = sweep_of(run)
    if root is None:
        return []
    try:
        sweep_name = str(load_yaml(root / "sweep.yaml").get("name") or root.name)
    except UserError:
        sweep_name = root.name
    lines = ["## Sweep", "",
             f"Run `{run.name}` of the sweep `{sweep_name}` (`{path_from(out, root)}` from this folder)."]
    fit = read_json(root / "fit.json")
    phi = _number(((fit or {}).get("fit") or {}).get("phi"))
    if phi is None:
        return lines + ["No `fit.json` in the sweep folder (`loopscale report` writes it): no φ.", ""]
    ci = (fit.get("ci") or {}).get("phi")
    ci_text = ""
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(_number(v) is not None for v in ci):
        method = str(fit.get("ci_method") or "bootstrap").replace("_", " ")
        ci_text = f", 95% CI {interval(ci)} ({method})"
    n_runs = (fit.get("fit") or {}).get("n_runs")
    runs_text = f" over {n_runs} runs" if isinstance(n_runs, int) else ""
    law = "L = E + A·(N_once + r^φ·N_rec)^(−α) + B·D^(−β)"
    if ((fit.get("diagnostics") or {}).get("phi_identified")) is False:
        lines += ["", f"φ is not identified by the sweep's runs{runs_text} (fitted to {law}): the point "
                  f"fit's {phi:.2f} is no measurement."]
    else:
        lines += ["", f"φ = {phi:.3f}{ci_text}, fitted{runs_text} to {law}."]
    check = law_check_in(fit, "fit.json")
    caveat = {"rejected": " (φ is then an average over the runs, not a measurement)",
              "inconclusive": " (φ is then no measurement: the runs are too few to test the law)",
              "not rejected": " (φ is then no measurement: the law's lack of fit is below 1%)"}
    if check is not None:
        headline = relative_text(law_headline(check), out)
        lines += ["", f"Law check: **{check.verdict}** — {headline}" + caveat.get(check.verdict, "")]
    return lines + [""]


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _usage(name: str, lay) -> list[str]:
    lines = [
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        f'tok = AutoTokenizer.from_pretrained("{name}", trust_remote_code=True)',
        f'model = AutoModelForCausalLM.from_pretrained("{name}", trust_remote_code=True)  # r = {lay.r}',
    ]
    if lay.injection == "hyperconnect":
        lines += [
            f'fewer = AutoModelForCausalLM.from_pretrained("{name}", trust_remote_code=True, r=1)',
            "```",
            "",
            f"The hyperconnection scalars are per loop iteration: the model runs at most r = {lay.r} loops "
            "(more is refused at load).",
        ]
    else:
        lines += [
            f'deeper = AutoModelForCausalLM.from_pretrained("{name}", trust_remote_code=True, r={2 * lay.r})',
            "```",
            "",
            "`r` is read at every call (`model.config.r = 8` works too); the KV cache of `generate()` holds "
            "one slot per (loop, layer).",
        ]
    lines += [
        "",
        f"lm-evaluation-harness: `lm_eval --model hf --model_args pretrained={name},trust_remote_code=True "
        "--tasks ...` (add `,r=8` for another loop count).",
        "",
    ]
    return lines
