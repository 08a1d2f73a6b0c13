"""The run contract (docs/contract.md): how ``loopscale sweep|price --trainer CMD`` hands each planned run to
another trainer and reads its result back.

- **In.** The run's folder holds ``run.json`` (``run_document``: budget, width, r, seed, recipe, steps,
  batch tokens, tokens, the planned FLOPs, N, learning rates, the unigram entropy, the base run it pairs
  with) and ``run.yaml`` (the resolved TrainConfig); the command runs with ``{run_dir}``, ``{run_json}``,
  ``{config}`` and ``{run_id}`` filled in and ``LOOPSCALE_RUN_DIR``, ``LOOPSCALE_RUN_ID``,
  ``LOOPSCALE_CONFIG`` set.
- **Out.** ``result.json`` (or one stdout line ``LOOPSCALE_RESULT {json}``, which the executor writes to
  result.json as printed): status, val_loss with val_loss_unit, tokens, flops_per_token, n_once, n_rec;
  per-step losses appended to metrics.jsonl.
- **Exit codes.** 0 done; 128 + a preemption signal (or death by one) preempted: the run stays pending and
  the next start reruns the same command in the same folder; any other code failed (exit.json keeps the
  log's last line).
- **Checks** (``check_result``), before a result enters a table: status, the unit, a finite loss below the
  unigram entropy (nats per token), tokens × flops_per_token within 2% of the planned FLOPs, n_once and n_rec
  equal to the plan's (``loopscale.accounting``). A result that fails is a failed run whose reason names
  the field; its files stay as the trainer wrote them.
"""

from __future__ import annotations

import json
import math
import shlex
import signal
import string
from pathlib import Path

from loopscale.errors import UserError

RUN_FILE = "run.json"
RUN_CONFIG_FILE = "run.yaml"  # the run's TrainConfig (the sweep folder's layout: sweep.rundir)
RESULT_FILE = "result.json"
RESULT_LINE = "LOOPSCALE_RESULT"
PLACEHOLDERS = ("run_dir", "run_json", "config", "run_id")
NATS = "nats_per_token"
BITS_PER_BYTE = "bits_per_byte"
UNITS = (NATS, BITS_PER_BYTE)
FLOPS_TOLERANCE = 0.02  # executed FLOPs may differ from the planned budget by this fraction
# Signals a scheduler preempts or a user stops a run with: exit 128 + one of these (or death by one) is a
# preemption, resumed by the next start; SIGKILL is not among them (the kernel's out-of-memory killer).
PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def check_template(template: str) -> None:
    """Refuse a trainer command that is empty, not shell-quotable or names a placeholder loopscale does
    not fill (one line naming it)."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise UserError(f"--trainer {template!r}: {exc}") from None
    if not words:
        raise UserError("--trainer is empty; give the command that trains one run, e.g. 'train.py {run_dir}'")
    for word in words:
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(word) if name is not None]
        except ValueError as exc:
            raise UserError(f"--trainer: {word!r}: {exc} (write a literal brace as {{{{ or }}}})") from None
        unknown = [name for name in fields if name not in PLACEHOLDERS]
        if unknown:
            raise UserError(
                f"--trainer: unknown placeholder {{{unknown[0]}}}; loopscale fills "
                + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
            )


def _values(folder: Path, name: str) -> dict[str, str]:
    return {
        "run_dir": str(folder),
        "run_json": str(folder / RUN_FILE),
        "config": str(folder / RUN_CONFIG_FILE),
        "run_id": name,
    }


def trainer_command(template: str, folder: Path, name: str) -> list[str]:
    """The trainer's command line for the run in ``folder``: the template split as a shell would (no shell
    runs it) and its placeholders filled word by word, so a path with spaces stays one argument."""
    values = _values(folder, name)
    return [word.format(**values) for word in shlex.split(template)]


def trainer_env(folder: Path, name: str) -> dict[str, str]:
    """The environment variables a trainer reads its run from."""
    values = _values(folder, name)
    return {
        "LOOPSCALE_RUN_DIR": values["run_dir"],
        "LOOPSCALE_RUN_ID": name,
        "LOOPSCALE_CONFIG": values["config"],
    }


def is_preempted(returncode: int) -> bool:
    """Exit 128 + a preemption signal, or death by one."""
    return any(returncode in (-sig, 128 + sig) for sig in PREEMPT_SIGNALS)


def run_document(
    spec, run, config: dict, *, learning_rates: dict, unigram: float | None, pairs_with: str | None
) -> dict:
    """run.json of one planned run (``config``: its TrainConfig mapping, run.yaml): what it is (group,
    recipe, seed), what it must spend and count (budget and planned FLOPs, tokens, steps, FLOPs per token, N
    under loopscale's accounting), its peak learning rates per parameter group, the unigram entropy its loss
    must beat (nats per token, None when not measured), the base run it pairs with (a path relative to the
    run folder, None outside ``price``), and its model and data (as in run.yaml)."""
    from loopscale.config import to_dict

    optim = config.get("optim") or {}
    return {
        "run": run.name,
        "sweep": spec.name,
        "trainer": spec.trainer,
        "group": run.group,
        "recipe": _recipe(spec, run),
        "optimizer": optim.get("recipe", "muonh"),
        "seed": run.seed,
        "budget": run.budget,
        "flops": run.total_flops,
        "flops_per_token": run.flops_per_token,
        "steps": run.steps,
        "batch_tokens": spec.batch_tokens,
        "tokens": run.tokens,
        "width": run.width,
        "r": run.r,
        "bptt_k": run.model.effective_bptt_k,
        "n": run.n,
        "n_once": run.n_once,
        "n_rec": run.n_rec,
        "learning_rates": learning_rates,
        "unigram_entropy": unigram,
        "val_loss_unit": NATS,
        "pairs_with": pairs_with,
        "model": to_dict(run.model),
        "data": config.get("data") or {},
    }


def _recipe(spec, run) -> dict:
    """What the run's group changes against the sweep's template and recipe (``model``, ``train`` and the
    BPTT window; empty for the template itself)."""
    group = next(g for g in spec.groups if g.name == run.group)
    change = {key: value for key, value in (("model", group.model), ("train", group.train)) if value}
    if group.bptt != "full":
        change["bptt"] = group.bptt
    return change


def result_from_log(text: str) -> str | None:
    """The JSON text of the last ``LOOPSCALE_RESULT {json}`` line of a trainer's output, None without one."""
    found = None
    for line in text.splitlines():
        if line.startswith(RESULT_LINE + " "):
            found = line[len(RESULT_LINE) + 1 :].strip()
    return found


def _number(result: dict, key: str) -> float | None:
    value = result.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def check_result(result: dict, expected: dict) -> tuple[dict, str | None]:
    """A trainer's result against its run.json ``expected`` → (the result with val_loss in nats per token,
    the first violation as "FIELD problem" or None). A result whose status is "failed" is returned as it is
    (the trainer's reason stands)."""
    status = result.get("status")
    if status not in ("ok", "failed"):
        return result, f"status must be 'ok' or 'failed', got {status!r}"
    if status == "failed":
        return result, None
    unit = result.get("val_loss_unit")
    if unit is None and expected.get("trainer") is None:
        unit = NATS  # loopscale's own trainer before the contract: nats per token
    if unit not in UNITS:
        return result, f"val_loss_unit must be {NATS!r} or {BITS_PER_BYTE!r}, got {unit!r}"
    loss = _number(result, "val_loss")
    if loss is None or not math.isfinite(loss):
        return result, f"val_loss must be a finite number, got {result.get('val_loss')!r}"
    if unit == BITS_PER_BYTE:
        per_token = _number(result, "bytes_per_token")
        if per_token is None or not (math.isfinite(per_token) and per_token > 0):
            return result, (
                f"val_loss_unit {BITS_PER_BYTE!r} needs bytes_per_token (the tokenizer's mean bytes per "
                f"token on the validation text) to convert to nats per token, got "
                f"{result.get('bytes_per_token')!r}"
            )
        loss = loss * math.log(2) * per_token
    converted = {**result, "val_loss": loss, "val_loss_unit": NATS}
    if unit != NATS:
        converted["val_loss_reported"] = {"value": result["val_loss"], "unit": unit}
    unigram = expected.get("unigram_entropy")
    if unigram is not None and not loss < unigram:
        return converted, (
            f"val_loss {loss:.4f} nats per token is not below the unigram entropy {unigram:.4f} of the data "
            "(the trainer learnt no more than token frequencies, or reported another unit)"
        )
    for key in ("tokens", "flops_per_token", "n_once", "n_rec"):
        value = _number(result, key)
        if value is None or not (math.isfinite(value) and value == int(value) and value >= 0):
            return converted, f"{key} must be a whole number, got {result.get(key)!r}"
    executed, planned = int(result["tokens"]) * int(result["flops_per_token"]), expected["flops"]
    off = executed / planned - 1
    if abs(executed - planned) > FLOPS_TOLERANCE * planned:
        return converted, (
            f"flops_per_token x tokens = {executed:.4g} FLOPs is {100 * off:+.1f}% off the planned "
            f"{planned:.4g} (at most {100 * FLOPS_TOLERANCE:g}%: the plan's {expected['tokens']} tokens at "
            f"{expected['flops_per_token']} FLOPs per token)"
        )
    for key in ("n_once", "n_rec"):
        if int(result[key]) != expected[key]:
            return converted, (
                f"{key} {int(result[key])} is not the plan's {expected[key]} (width {expected['width']}, r "
                f"{expected['r']} under loopscale's accounting: another architecture or another count)"
            )
    return converted, None


def write_stdout_result(folder: Path, log_text: str) -> bool:
    """Write a ``LOOPSCALE_RESULT`` line of ``log_text`` to the run's result.json exactly as printed →
    whether there was one. A line that is not a JSON object is written as a failed result naming it."""
    from loopscale.io import atomic_write_json, atomic_write_text

    text = result_from_log(log_text)
    if text is None:
        return False
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        parsed = None
        problem = f"its JSON does not parse ({exc.msg} at column {exc.colno})"
    else:
        problem = None if isinstance(parsed, dict) else "it is not a JSON object"
    if problem:
        reason = f"contract: the {RESULT_LINE} line on stdout is unreadable: {problem}"
        atomic_write_json(Path(folder) / RESULT_FILE, {"status": "failed", "reason": reason})
    else:
        atomic_write_text(Path(folder) / RESULT_FILE, text + "\n")
    return True

