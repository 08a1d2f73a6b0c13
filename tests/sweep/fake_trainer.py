"""A trainer that does not train: it honours the run contract (docs/contract.md) from run.json alone, or
breaks one clause of it, chosen by the run's group name (tests/sweep/test_contract.py).

    python fake_trainer.py RUN_DIR

Groups: ``good`` (result.json), ``stdout`` (a LOOPSCALE_RESULT line), ``bpb`` (bits per byte with bytes per
token), ``nofile`` (exit 0, no result), ``unit`` (no unit), ``flops`` (10% fewer tokens), ``nmismatch``
(n_rec of another width), ``nan`` (a NaN loss), ``crash`` (exit 1 with a message on stderr), ``sigterm``
(killed by SIGTERM on its first start, finished on the next); any other group (a ``price`` run) reports its
base run's loss + 0.05 nats.
"""

import json
import math
import os
import signal
import sys
from pathlib import Path

folder = Path(sys.argv[1])
assert os.environ["LOOPSCALE_RUN_DIR"] == str(folder)
plan = json.loads((folder / "run.json").read_text())
assert os.environ["LOOPSCALE_RUN_ID"] == plan["run"]
assert Path(os.environ["LOOPSCALE_CONFIG"]).is_file()
mode = plan["group"]

# a loss below the unigram entropy that falls with width and r, as a trained model's would (nats per token);
# a run of ``price`` (pairs_with set): its base run's loss plus 0.05 nats, a recipe that costs every run alike
loss = plan["unigram_entropy"] - 0.5 - 0.01 * plan["width"] / 16 - 0.02 * plan["r"]
if plan["pairs_with"] is not None:
    loss = json.loads((folder / plan["pairs_with"] / "result.json").read_text())["val_loss"] + 0.05
with open(folder / "metrics.jsonl", "a") as metrics:
    for step in (1, plan["steps"]):
        metrics.write(json.dumps({"step": step, "loss": loss + 1 / step}) + "\n")
result = {
    "status": "ok",
    "val_loss": loss,
    "val_loss_unit": "nats_per_token",
    "tokens": plan["tokens"],
    "flops_per_token": plan["flops_per_token"],
    "n_once": plan["n_once"],
    "n_rec": plan["n_rec"],
}
if mode == "sigterm" and not (folder / "started").exists():
    (folder / "started").write_text("checkpoint\n")
    os.kill(os.getpid(), signal.SIGTERM)
if mode == "crash":
    print("CUDA error: an illegal memory access was encountered", file=sys.stderr)
    sys.exit(1)
if mode == "nofile":
    sys.exit(0)
if mode == "unit":
    del result["val_loss_unit"]
if mode == "bpb":
    result.update(val_loss=loss / math.log(2) / 3.5, val_loss_unit="bits_per_byte", bytes_per_token=3.5)
if mode == "flops":
    result["tokens"] = round(plan["tokens"] * 0.9)
if mode == "nmismatch":
    result["n_rec"] = plan["n_rec"] * 2
if mode == "nan":
    result["val_loss"] = float("nan")
if mode == "stdout":
    print("step 1 loss 9.9")
    print("LOOPSCALE_RESULT " + json.dumps(result))
    sys.exit(0)
(folder / "result.json").write_text(json.dumps(result))
