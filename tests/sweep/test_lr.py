"""LR calibration at a new scale: the calibration sweep's runs, the shared multiplier, the CLI end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopscale.errors import UserError
from loopscale.sweep import plan_sweep, preset
from loopscale.sweep.lr import CALIBRATION_FILE, base_optim, calibrate, lr_sweep_spec
from loopscale.sweep.plan import run_train_config

from .helpers import env_with, write_spec

MULTS = [0.5, 1.0, 2.0, 4.0, 8.0]


def test_spec_scales_every_base_lr_and_reanchors():
    base = preset("cpu")
    spec = lr_sweep_spec(
        base, budget=3e12, widths=[32, 48], rs=[1, 4], multipliers=MULTS, ref_width=48, ref_batch_tokens=4096
    )
    runs = plan_sweep(spec)
    assert len(runs) == len(MULTS) * 2 * 2 and {r.budget for r in runs} == {3e12}
    default = base_optim(base)
    for run in runs:
        m = float(run.group[1:])
        optim = run_train_config(spec, run)["optim"]
        assert (optim["ref_width"], optim["ref_batch_tokens"]) == (48, 4096)
        for key in ("matrix_lr", "embed_lr", "unembed_lr", "norm_lr", "hc_lr"):
            assert optim[key] == pytest.approx(getattr(default, key) * m, rel=1e-12)


@pytest.mark.parametrize("multipliers", [[1.0, 2.0], [1.0, 1.0, 2.0], [0.0, 1.0, 2.0], [1.0, 2.0, math.inf]])
def test_bad_multipliers_refused(multipliers):
    with pytest.raises(UserError, match="multipliers"):
        lr_sweep_spec(preset("cpu"), budget=1e12, widths=[32], rs=[1], multipliers=multipliers)


def _rows(optimum: float, curvature: float = 0.05) -> list[dict]:
    rows = []
    for width, r, level in ((32, 1, 3.8), (48, 1, 3.7), (32, 4, 3.9), (48, 4, 3.85)):
        for m in MULTS:
            loss = level + curvature * (math.log(m) - math.log(optimum)) ** 2
            rows.append({"group": f"m{m:g}", "width": width, "r": r, "status": "ok", "loss": loss})
    return rows


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=0.7, max_value=5.5))
def test_recovers_a_quadratic_optimum(optimum):
    out = calibrate(_rows(optimum))
    assert out["bracketed"]
    assert out["shared_multiplier"] == pytest.approx(optimum, rel=0.02)
    assert all(c["regret_at_shared"] < 1e-4 for c in out["configs"])


def test_edge_optimum_is_not_bracketed_and_incomplete_configs_are_named():
    rows = _rows(20.0)
    rows.append({"group": "m1", "width": 64, "r": 1, "status": "ok", "loss": 3.5})
    out = calibrate(rows)
    assert not out["bracketed"] and out["shared_multiplier"] == pytest.approx(8.0)
    assert out["incomplete"] == ["d=64 r=1"]
    with pytest.raises(UserError, match="no finished runs"):
        calibrate([{**r, "status": "failed"} for r in rows])


def test_cli_runs_resumes_and_records(tmp_path, tiny_dataset):
    spec = write_spec(tmp_path, tiny_dataset)
    out = tmp_path / "lr"
    cmd = [
        sys.executable,
        "-m",
        "loopscale",
        "lr-sweep",
        str(spec),
        "--out",
        str(out),
        "--budget",
        "1e9",
        "--widths",
        "16",
        "--rs",
        "2",
        "--multipliers",
        "0.5",
        "1",
        "2",
        "--threads",
        "1",
    ]
    first = subprocess.run(cmd, env=env_with(), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    doc = json.loads((out / CALIBRATION_FILE).read_text())
    assert doc["multipliers"] == [0.5, 1.0, 2.0] and len(doc["configs"]) == 1
    assert doc["recommended_optim"]["matrix_lr"] == pytest.approx(0.014 * doc["shared_multiplier"])
    assert "shared multiplier m*" in first.stdout
    again = subprocess.run(cmd, env=env_with(), capture_output=True, text=True)
    assert again.returncode == 0 and json.loads((out / CALIBRATION_FILE).read_text()) == doc
