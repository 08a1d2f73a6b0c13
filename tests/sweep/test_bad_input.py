"""Bad input → one actionable line on stderr, exit 2, and nothing on disk changed (issue 4, must-show 5)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from loopscale.cli import main
from loopscale.sweep import load_spec
from loopscale.sweep.rundir import init_sweep

from .helpers import synthetic_sweep

GOOD = """
name: tiny
batch_tokens: 256
model: {depth: 4, prelude: 1, coda: 1, head_dim: 16, vocab_size: 64, seq_len: 16}
groups:
  - name: main
    rs: [1, 2]
    grid:
      - {budget: 1e9, widths: [16, 32]}
"""


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


def write(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize(
    "text, expected",
    [
        ("name: x\ngroups: [\n", "malformed YAML"),
        (GOOD + "colour: blue\n", "unknown key(s) 'colour'"),
        (GOOD.replace("rs: [1, 2]", "rs: [1, 2]\n    flavour: x"), "unknown key(s) 'flavour'"),
        (GOOD.replace("head_dim: 16", "head_dim: 16, heads: 2"), "unknown key(s) 'heads'"),
        ("name: x\nbatch_tokens: 8\ngroups: []\n", "groups is empty"),
        (GOOD.replace("      - {budget: 1e9, widths: [16, 32]}", "      []"), "grid is empty"),
        (GOOD.replace("widths: [16, 32]", "widths: []"), "lists no widths"),
        (GOOD.replace("1e9", "1e5"), "smaller than one step"),
        (GOOD.replace("widths: [16, 32]", "widths: [16, 40]"), "not divisible by head_dim 16"),
        (GOOD.replace("rs: [1, 2]", "rs: [1, 3]"), "fewer than r=3"),
        (GOOD.replace("1e9", "-1e9"), "budget must be a positive"),
        (GOOD + "train: {seed: 3}\n", "train may not set seed"),
    ],
)
def test_bad_spec_is_one_line_exit_2(tmp_path, capsys, text, expected):
    spec = write(tmp_path, text)
    before = spec.read_bytes()
    code, err = run_cli(capsys, "plan", str(spec), "--no-probe")
    assert code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert expected in err, err
    assert spec.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.yaml"]


def test_error_names_the_run(tmp_path, capsys):
    code, err = run_cli(
        capsys,
        "plan",
        str(write(tmp_path, GOOD.replace("widths: [16, 32]", "widths: [16, 40]"))),
        "--no-probe",
    )
    assert code == 2 and "run main_C1e9_d40_r1" in err


def test_missing_spec_file_and_unknown_preset(tmp_path, capsys):
    code, err = run_cli(capsys, "plan", str(tmp_path / "nope.yaml"), "--no-probe")
    assert code == 2 and "not found" in err
    code, err = run_cli(capsys, "plan", "--preset", "no-such-grid", "--no-probe")
    assert code == 2 and "unknown preset 'no-such-grid'" in err and "cpu" in err


def test_collect_on_a_folder_that_is_not_a_sweep(tmp_path, capsys):
    code, err = run_cli(capsys, "collect", str(tmp_path))
    assert code == 2 and "not a sweep folder" in err
    assert list(tmp_path.iterdir()) == []


def test_good_spec_plans(tmp_path, capsys):
    assert main(["plan", str(write(tmp_path, GOOD)), "--format", "json", "--no-probe"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in doc["runs"]] == [
        "main_C1e9_d16_r1",
        "main_C1e9_d16_r2",
        "main_C1e9_d32_r1",
        "main_C1e9_d32_r2",
    ]


def test_truncated_result_json_is_one_line_and_nothing_is_lost(tmp_path, capsys):
    root = tmp_path / "sweep"
    runs = synthetic_sweep(root, "demo")
    assert main(["collect", str(root)]) == 0
    capsys.readouterr()
    table_before = (root / "results.csv").read_bytes()
    victim = root / "runs" / runs[3].name / "result.json"
    truncated = victim.read_bytes()[:40]
    victim.write_bytes(truncated)
    for argv in (["collect", str(root)], ["report", str(root), "--restarts", "5", "--bootstrap", "0"],
                 ["sweep", "--out", str(root)]):
        code, err = run_cli(capsys, *argv)
        assert code == 2, argv
        assert len(err.splitlines()) == 1 and str(victim) in err and "truncated" in err
        assert victim.read_bytes() == truncated  # the evidence is kept
        assert (root / "results.csv").read_bytes() == table_before  # the last good table is kept
        assert not (root / "report").exists()


def test_sweep_refuses_missing_data_and_a_different_spec(tmp_path, capsys, tiny_dataset):
    spec = write(tmp_path, GOOD + "train: {data: {path: /nonexistent/dataset}}\n")
    out = tmp_path / "out"
    code, err = run_cli(capsys, "sweep", str(spec), "--out", str(out))
    assert code == 2 and "/nonexistent/dataset" in err and len(err.splitlines()) == 1
    assert not out.exists()  # nothing written before every run checked out
    train = f"train: {{data: {{path: {tiny_dataset}}}, optim: {{ref_r_looped: 2}}}}\n"
    good = write(tmp_path, GOOD + train, "good.yaml")
    init_sweep(load_spec(good), out)
    before = (out / "sweep.yaml").read_bytes()
    other = write(tmp_path, GOOD.replace("1e9", "2e9") + train, "other.yaml")
    code, err = run_cli(capsys, "sweep", str(other), "--out", str(out))
    assert code == 2 and "already holds a different sweep" in err
    assert (out / "sweep.yaml").read_bytes() == before
