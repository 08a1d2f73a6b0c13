#!/usr/bin/env bash
# Commit a sweep's progress so a session that ends (or a machine that is lost) costs nothing finished:
# sweep.yaml, executor.json (thread policy), results.csv, curves.parquet (every finished run's per-step curves,
# written by `loopscale collect`), every run's run.yaml, and for FINISHED runs only (result.json present) their
# config.yaml, result.json, train.log, eval.json (downstream eval) and reused.json (a run taken from a `reuse`
# sweep folder). The runs' own metrics.jsonl stay local (.gitignore): curves.parquet holds them.
# Unfinished runs' partial files and all weights/checkpoints stay out (see .gitignore); only paths under
# SWEEP_DIR are committed, whatever else is staged.
# Usage: scripts/commit_sweep.sh SWEEP_DIR [MESSAGE]
set -euo pipefail
dir=${1:?usage: scripts/commit_sweep.sh SWEEP_DIR [MESSAGE]}
[ -f "$dir/sweep.yaml" ] || { echo "commit_sweep: $dir is not a sweep folder (no sweep.yaml)" >&2; exit 2; }
paths=("$dir/sweep.yaml")
[ -f "$dir/results.csv" ] && paths+=("$dir/results.csv")
[ -f "$dir/executor.json" ] && paths+=("$dir/executor.json")  # the thread policy a bare resume reuses
# a `loopscale price` folder: its looks and report (written after every look)
for f in curves.parquet price.json report.md report.html loss_change_by_r.png loss_change_by_r.svg \
  excess_by_width.png excess_by_width.svg; do
  [ -f "$dir/$f" ] && paths+=("$dir/$f")
done
done_runs=0
for run in "$dir"/runs/*/; do
  paths+=("${run}run.yaml")
  if [ -f "${run}result.json" ]; then
    done_runs=$((done_runs + 1))
    git rm -q --cached --ignore-unmatch "${run}metrics.jsonl" >/dev/null
    for f in config.yaml result.json train.log eval.json reused.json; do
      [ -f "$run$f" ] && paths+=("$run$f")
    done
  else  # an unfinished run: keep its partial files out of history
    git rm -q --cached --ignore-unmatch "${run}config.yaml" "${run}metrics.jsonl" "${run}train.log" >/dev/null
  fi
done
git add -- "${paths[@]}"
if git diff --cached --quiet -- "$dir"; then
  echo "commit_sweep: nothing new in $dir"
  exit 0
fi
git commit -q -m "${2:-Sweep progress: $dir, $done_runs finished runs}" -- "$dir"
echo "commit_sweep: committed $dir ($done_runs finished runs)"
