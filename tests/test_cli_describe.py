"""`loopscale describe`: the paper's numbers from flags and YAML, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loopscale.cli import main


def describe_json(capsys, *args: str) -> dict:
    assert main(["describe", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_issue_example(capsys):
    out = describe_json(capsys, "--width", "384", "--r", "1", "--vocab", "32064", "--seq-len", "2048")
    assert out["n"] == 35_405_952
    assert out["flops_per_token"] == 475_047_936
    assert out["n_embed"] == 2 * 32_064 * 384
    assert (out["prelude"], out["rec_layers"], out["coda"], out["injection"]) == (0, 20, 0, "none")


def test_defaults_are_the_paper_template(capsys):
    out = describe_json(capsys)  # d = 640, r = 1, T = 2048, V = 32,064
    assert (out["width"], out["n"], out["flops_per_token"]) == (640, 98_331_520, 1_027_676_160)
    assert out["flops_per_token_forward"] * 3 == out["flops_per_token"]


@pytest.mark.parametrize("flags,n,n_once,n_rec,flops", [
    (["--width", "640", "--r", "4"], 40_152_960, 19_667_840, 20_485_120, 1_047_336_960),
    (["--width", "1280", "--r", "8"], 121_260_800, 78_657_280, 42_603_520, 3.3923e9),
    (["--width", "640", "--r", "2", "--bptt-k", "1"], 59_818_880, None, None, 793_016_320),
    (["--width", "640", "--r", "4", "--injection", "hyperconnect", "--hc-lanes", "2"], None, None, None,
     1_027_799_040),
    (["--width", "640", "--r", "4", "--injection", "additive"], None, None, None, 1_027_676_160),
])
def test_variants(capsys, flags, n, n_once, n_rec, flops):
    out = describe_json(capsys, *flags)
    assert out["n_once"] + out["n_rec"] == out["n"]
    if n is not None:
        assert out["n"] == n
    if n_once is not None:
        assert (out["n_once"], out["n_rec"]) == (n_once, n_rec)
    if isinstance(flops, float):  # Table §3.3 prints 4 decimals
        assert f"{out['flops_per_token']:.4e}" == f"{flops:.4e}"
    else:
        assert out["flops_per_token"] == flops


def test_yaml_config_with_flag_override(tmp_path, capsys):
    cfg = tmp_path / "model.yaml"
    cfg.write_text("width: 384\nr: 8\nvocab_size: 32064\n")
    assert describe_json(capsys, "--config", str(cfg))["n"] == 10_917_504
    assert describe_json(capsys, "--config", str(cfg), "--r", "4")["n"] == 14_457_984


def test_table_output(capsys):
    assert main(["describe", "--width", "384", "--r", "4"]) == 0
    text = capsys.readouterr().out
    assert "prelude 2 → 4 layers × r=4 → coda 2" in text
    assert "14,457,984" in text and "482,125,824" in text


@pytest.mark.parametrize("args,match", [
    (["--r", "3"], "r=3 does not divide the recurrent depth 16"),
    (["--width", "100"], "not divisible by head_dim"),
    (["--r", "4", "--injection", "hyperconnect", "--bptt-k", "2"], "hyperconnections"),
    (["--r", "4", "--bptt-k", "9"], "bptt_k must be in 1..r=4"),
    (["--config", "/nonexistent/model.yaml"], "config file not found"),
])
def test_bad_input_exits_2_with_one_line(capsys, args, match):
    assert main(["describe", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loopscale describe: error: ") and match in lines[0]


def test_unknown_yaml_key(tmp_path, capsys):
    cfg = tmp_path / "model.yaml"
    cfg.write_text("width: 384\nloops: 4\n")
    assert main(["describe", "--config", str(cfg)]) == 2
    assert "unknown key(s) 'loops'" in capsys.readouterr().err


def test_console_command_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "loopscale", "describe", "--r", "3"], capture_output=True,
                          text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "does not divide" in proc.stderr
