"""Issue 20: published artefacts hold no absolute path of the machine that wrote them. A tiny sweep and
its evaluation write none (train.log names the interpreter, eval.json records its paths relative to its
folder), and the repository's results/ hold none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import SEQ_LEN, VOCAB

from loopscale.published import absolute_paths

REPO = Path(__file__).parents[2]
SPEC = f"""
name: paths
batch_tokens: 64
model: {{depth: 4, prelude: 1, coda: 1, head_dim: 16, vocab_size: {VOCAB}, seq_len: {SEQ_LEN}}}
train:
  device: cpu
  progress: false
  checkpoint_every_steps: 10
  data: {{path: data, val_tokens: 256}}
  optim: {{ref_width: 16, ref_batch_tokens: 64, ref_r_looped: 2}}
groups:
  - name: main
    rs: [2]
    grid:
      - {{budget: 3.0e+8, widths: [16]}}
"""


def test_absolute_paths_finds_machine_paths_and_nothing_else():
    text = 'python /home/u/x.py "/tmp/a/b" x=/work/y/z see https://a.org/b/c 12 tokens/s </div> 1/2'
    assert absolute_paths(text) == ["/home/u/x.py", "/tmp/a/b", "/work/y/z"]


def test_a_sweep_and_its_evaluation_write_no_absolute_path(dataset, tmp_path):
    (tmp_path / "data").symlink_to(dataset)  # the spec names its data relative to where it runs, as usual
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for args in (["sweep", spec.name, "--out", "sweep", "--threads", "1"],
                 ["eval-sweep", "sweep", "--tasks", "induction_head", "--limit", "4", "--device", "cpu"]):
        done = subprocess.run([sys.executable, "-m", "loopscale", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    (run,) = (tmp_path / "sweep" / "runs").iterdir()
    written = [p for p in (tmp_path / "sweep").rglob("*") if p.is_file() and p.suffix != ".safetensors"]
    assert {"train.log", "eval.json", "result.json", "config.yaml"} <= {p.name for p in written}
    machine = (str(tmp_path), str(Path(sys.executable).parent))
    for path in written:
        text = path.read_text(errors="replace")
        assert absolute_paths(text) == [] and not any(m in text for m in machine), path
    document = json.loads((run / "eval.json").read_text())
    assert document["checkpoint"] == "."
    assert (run / document["tokenizer"]).resolve() == (dataset / "tokenizer.json").resolve()
    assert (run / "train.log").read_text().startswith("=== ")
    assert f" {Path(sys.executable).name} -m loopscale train --config run.yaml --out ." in (
        run / "train.log").read_text()


def test_the_published_results_hold_no_absolute_path():
    # what would be published: tracked or not ignored (weights and parquet tables are git-ignored)
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "results"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    found = []
    for path in sorted(REPO / name for name in listed):
        if path.is_file() and path.suffix not in (".png", ".parquet"):  # binary: images, curves (no paths)
            found += [f"{path.relative_to(REPO)}: {p}" for p in absolute_paths(path.read_text())]
    assert found == []  # scripts/relativise_paths.py rewrites older ones
