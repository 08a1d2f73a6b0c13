"""Issue 20: Ctrl-C in `loopscale train` is acknowledged at once, inside the step it arrives in, with the
resume command; the run then checkpoints at the end of that step and stops (exit 130) as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import tiny_config

from loopscale.config import dump_yaml
from loopscale.train.checkpoint import latest_checkpoint

HOOKS = Path(__file__).parents[1] / "sweep" / "crash_hooks"


def test_ctrl_c_is_acknowledged_at_once_with_the_resume_command(dataset, tmp_path):
    (tmp_path / "run.yaml").write_text(dump_yaml(tiny_config(dataset, steps=40, checkpoint_every_steps=2)))
    markers = tmp_path / "markers"
    markers.mkdir()
    # the hold hook (crash_hooks/sitecustomize.py) stops the run inside its step 2, right after the
    # checkpoint, until the test releases it: the interrupt arrives mid-step whatever the machine's speed
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LOOPSCALE_NO_TCMALLOC": "1", "LOOPSCALE_TEST_PAUSE": "hold",
           "LOOPSCALE_TEST_MARKERS": str(markers),
           "PYTHONPATH": os.pathsep.join([str(HOOKS), os.environ.get("PYTHONPATH", "")])}
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loopscale", "train", "--config", "run.yaml", "--out", "run"],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as an interactive user's
        )
        while not (markers / "hold-run").exists():
            assert proc.poll() is None, err_path.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        while "interrupt received" not in err_path.read_text():  # said while the step is still held
            assert proc.poll() is None, err_path.read_text()
            time.sleep(0.05)
        (markers / "release").touch()
        assert proc.wait() == 130, err_path.read_text()
    text = err_path.read_text()
    assert ("interrupt received: saving a checkpoint at the end of this step; resume with: "
            "loopscale train --out run --resume") in text
    assert text.count("interrupt received") == 1
    latest = latest_checkpoint(tmp_path / "run")
    assert latest is not None and int(latest.name.split("_")[1]) == 3  # the step it arrived in, then stopped
    assert not (tmp_path / "run" / "result.json").exists()
