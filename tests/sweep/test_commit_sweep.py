"""scripts/commit_sweep.sh: a long sweep's progress is committed run by run, finished runs only; per-step
curves as the sweep's one curves.parquet, not the runs' metrics.jsonl."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "commit_sweep.sh"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_commits_finished_runs_small_files_and_nothing_else(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@t")
    git(repo, "config", "user.name", "t")
    (repo / ".gitignore").write_text("*.safetensors\n")
    (repo / "other.txt").write_text("staged work that is not the sweep's\n")
    git(repo, "add", "other.txt")
    sweep = repo / "sw"
    for name, done in (("a", True), ("b", False)):
        run = sweep / "runs" / name
        run.mkdir(parents=True)
        for f in ("run.yaml", "config.yaml", "metrics.jsonl", "train.log", "model.safetensors"):
            (run / f).write_text(f)
        if done:
            (run / "result.json").write_text("{}")
    (sweep / "sweep.yaml").write_text("name: x\n")
    (sweep / "curves.parquet").write_text("the finished runs' per-step curves")
    out = subprocess.run(["bash", str(SCRIPT), "sw"], cwd=repo, capture_output=True, text=True, check=True)
    assert "1 finished runs" in out.stdout
    tracked = set(git(repo, "ls-tree", "-r", "--name-only", "HEAD").split())
    assert tracked == {
        "sw/sweep.yaml",
        "sw/curves.parquet",
        "sw/runs/a/run.yaml",
        "sw/runs/a/config.yaml",
        "sw/runs/a/result.json",
        "sw/runs/a/train.log",
        "sw/runs/b/run.yaml",
    }
    assert "other.txt" in git(repo, "diff", "--cached", "--name-only")  # still staged, not committed
    again = subprocess.run(["bash", str(SCRIPT), "sw"], cwd=repo, capture_output=True, text=True, check=True)
    assert "nothing new" in again.stdout
