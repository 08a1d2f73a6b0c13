"""A mistyped input path is answered at once: every command that reads a file or folder refuses a missing one
with one line and exit 2 before it loads torch, SciPy, matplotlib, pyarrow or tokenizers (issue 20).

Each command runs in a process of its own (the modules it has loaded are the measure, not seconds);
``benchmarks/fast_fail.py`` times the same commands, one fresh interpreter each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "scipy", "matplotlib", "pyarrow", "tokenizers")

# Every argument naming an input is missing (under a fresh working folder); outputs are fresh paths there.
COMMANDS = (
    ("fit", "missing.csv"),
    ("compare", "missing.csv", "missing2.csv"),
    ("equiv", "--fit", "missing.json", "--r", "2", "--params", "1e6"),
    ("train", "--config", "missing.yaml", "--out", "run"),
    ("plan", "missing.yaml"),
    ("sweep", "missing.yaml", "--out", "sweep"),
    ("lr-sweep", "missing.yaml", "--out", "lr", "--budget", "1e12", "--widths", "32"),
    ("collect", "missing/"),
    ("report", "missing/"),
    ("design", "--from", "missing/"),
    ("eval", "missing/"),
    ("eval-sweep", "missing/"),
    ("export", "missing/", "--out", "hf"),
    ("data", "info", "missing/"),
    ("data", "baselines", "missing/"),
    ("data", "prepare", "--from", "missing/", "--root", "data"),
    ("data", "corpus", "--from", "missing/", "--out", "corpus"),
    ("data", "tokenizer", "--corpus", "missing/", "--out", "tokenizer.json"),
    ("data", "pack", "--corpus", "missing/", "--tokenizer", "missing.json", "--out", "packed"),
    ("data", "import-parquet", "--train", "missing.parquet", "--val", "missing.parquet", "--vocab", "300",
     "--out", "packed"),
)

# One fresh interpreter imports loopscale's command line once, then runs each command in a forked child of
# itself (a process that has loaded nothing else) and reports its exit code, stderr and the heavy modules it
# loaded: the same measure as one interpreter per command, without paying 20 interpreter starts.
_PROBE = """
import io, json, os, sys, traceback
import loopscale.cli as cli

heavy, commands = json.loads(sys.argv[1]), json.loads(sys.argv[2])
reports = []
for argv, cwd in commands:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.chdir(cwd)
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        try:
            code = cli.main(argv)
        except BaseException:
            code = "raised: " + traceback.format_exc()
        report = {"code": code, "stderr": sys.stderr.getvalue().splitlines(),
                  "loaded": sorted(m for m in heavy if m in sys.modules)}
        os.write(write_end, json.dumps(report).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        reports.append(json.loads(pipe.read()))
    os.waitpid(pid, 0)
print(json.dumps(reports))
"""


def run_missing(commands: list[tuple[str, ...]], folder: Path) -> list[dict]:
    """Run each ``loopscale ARGV`` of ``commands`` in a fresh process whose working folder is an empty
    subfolder of ``folder`` (one per command): {code, stderr lines, loaded heavy modules} per command."""
    cwds = []
    for i in range(len(commands)):
        (folder / str(i)).mkdir()
        cwds.append(str(folder / str(i)))
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(HEAVY), json.dumps(list(zip(commands, cwds)))],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return [{**report, "cwd": Path(cwd)} for report, cwd in zip(json.loads(proc.stdout), cwds)]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[tuple[str, ...], dict]:
    return dict(zip(COMMANDS, run_missing(list(COMMANDS), tmp_path_factory.mktemp("fast_fail"))))


@pytest.mark.parametrize(
    "argv",
    COMMANDS,
    ids=[" ".join(a[:2]) for a in COMMANDS],
)
def test_missing_input_fails_before_heavy_imports(argv, reports):
    result = reports[argv]
    assert result["code"] == 2, result
    assert len(result["stderr"]) == 1, result["stderr"]
    line = result["stderr"][0]
    assert line.startswith(f"loopscale {argv[0]}: error: ") and "missing" in line, line
    assert result["loaded"] == []
    assert list(result["cwd"].iterdir()) == []  # nothing was written for a refused command
