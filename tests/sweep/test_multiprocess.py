"""The multi-process path of a sweep: runs with ``nproc: 2`` go through torchrun (gloo on CPU), survive a
kill -9 of the whole sweep (no rank outlives it) and a Ctrl-C to the driver (both ranks checkpoint at the
same step and stop), resume with the bare command to exactly the losses of an uninterrupted 2-process
sweep, and match the 1-process runs at the same global batch up to the order of the gradient all-reduce.

Measured on this test's runs: the per-step training losses of 2 ranks and of 1 process agree to 5e-7 for
r = 1 over all 67 steps; for r = 2 the fp32 rounding difference of the all-reduce grows ≈ 10× per 10 steps
(4.8e-6 at step 10, 2.8e-5 at step 20, 4e-3 by step 40: the loop amplifies it), so the first 10 steps are
compared tightly (1e-5 nats: a wrong batch split or gradient scale shows at step 2) and the final
validation loss to 1e-3 relative."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from loopscale.train.checkpoint import latest_checkpoint

from .helpers import env_with, results, sweep_cmd, wait_until_gone, write_spec
from .test_crash_safety import kill_when, metrics_lines

BUDGET = 4e8  # ≈ 70 steps of 64 tokens at d = 16: long enough to checkpoint (every 10 steps) and kill


@pytest.fixture(scope="module")
def ddp_reference(tiny_dataset, tmp_path_factory):
    """An uninterrupted sweep with ``nproc: 2``: (its spec, {run: (status, loss repr)})."""
    tmp = tmp_path_factory.mktemp("ddp-reference")
    two = tmp / "two.yaml"
    two.write_text(write_spec(tmp, tiny_dataset, budget=BUDGET).read_text() + "nproc: 2\n")
    out = tmp / "sweep"
    straight = subprocess.run(sweep_cmd(out, two), env=env_with(), capture_output=True, text=True)
    assert straight.returncode == 0, straight.stderr
    return two, results(out)


def test_two_process_runs_killed_and_resumed_match_one_process_runs(tiny_dataset, tmp_path, ddp_reference):
    one = write_spec(tmp_path, tiny_dataset, budget=BUDGET)
    single_out = tmp_path / "single"
    single = subprocess.run(sweep_cmd(single_out, one), env=env_with(), capture_output=True, text=True)
    assert single.returncode == 0, single.stderr
    expected = results(single_out)

    two, uninterrupted = ddp_reference
    out = tmp_path / "ddp"
    proc = subprocess.Popen(
        sweep_cmd(out, two),
        env=env_with(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = out / "runs" / next(iter(expected))
    ckpt, metrics = first / "checkpoints" / "latest", first / "metrics.jsonl"
    kill_when(proc, lambda: ckpt.exists() and metrics_lines(metrics) > 15)
    wait_until_gone(out)  # torchrun and both ranks die with the executor: no orphan trains on unlocked
    assert not (first / "result.json").exists()

    rerun = subprocess.run(sweep_cmd(out), env=env_with(), capture_output=True, text=True)  # README's resume
    assert rerun.returncode == 0, rerun.stderr
    table = results(out)  # asserts every run appears once
    assert table == uninterrupted  # killed + resumed = uninterrupted, bit for bit (repr in CSV)
    assert set(table) == set(expected)
    for name, (status, loss) in table.items():
        assert status == "ok" == expected[name][0]
        assert float(loss) == pytest.approx(float(expected[name][1]), rel=1e-3)
        ranks2 = [json.loads(line)["loss"] for line in (out / "runs" / name / "metrics.jsonl").open()]
        ranks1 = [json.loads(line)["loss"] for line in (single_out / "runs" / name / "metrics.jsonl").open()]
        assert len(ranks2) == len(ranks1)
        assert ranks2[:10] == pytest.approx(ranks1[:10], abs=1e-5)
        result = json.loads((out / "runs" / name / "result.json").read_text())
        assert result["world_size"] == 2 and result["steps_done"] == result["steps"]
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1))  # the resumed run redid no step twice


def test_sigint_to_the_driver_stops_two_process_runs_at_a_checkpoint(tiny_dataset, tmp_path, ddp_reference):
    """Ctrl-C to a sweep whose run is in flight under torchrun: the driver forwards it, torchrun passes it
    to both ranks, which agree on a step, write a checkpoint there and stop; the rerun finishes bit-identical
    to the uninterrupted 2-process sweep."""
    two, uninterrupted = ddp_reference
    spec = tmp_path / "two.yaml"  # no periodic checkpoints: the only checkpoint is the one the stop writes
    spec.write_text(two.read_text().replace("checkpoint_every_steps: 10", "checkpoint_every_steps: 100000"))
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        sweep_cmd(out, spec),
        env=env_with(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as an interactive user's sweep
    )
    first = out / "runs" / next(iter(uninterrupted))
    while metrics_lines(first / "metrics.jsonl") < 10:  # both ranks are in the training loop
        assert proc.poll() is None, "the sweep ended before the interrupt"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)  # to the driver only (as `kill -INT`)
    err = proc.communicate()[1]
    assert proc.returncode == 130, err
    assert "interrupted: stopping 1 running run(s)" in err
    assert f"resume with `loopscale sweep --out {out}`" in err
    wait_until_gone(out)
    latest = latest_checkpoint(first)
    steps = [json.loads(line)["step"] for line in (first / "metrics.jsonl").read_text().splitlines()]
    assert latest is not None and int(latest.name.split("_")[1]) == steps[-1]  # stopped right after it
    assert not (first / "result.json").exists()

    rerun = subprocess.run(sweep_cmd(out), env=env_with(), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert results(out) == uninterrupted
