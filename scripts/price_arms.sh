#!/usr/bin/env bash
# The issue-41 arms: `loopscale price` for each recipe against results/laptop-factorial, one after another,
# each capped at HOURS of training (default 0.45) on 2 workers. Every COMMIT_EVERY_S seconds (and at the
# end) each arm's finished runs, price.json and report are committed with scripts/commit_sweep.sh, so a
# session that ends loses only runs in flight; rerunning this script resumes (price replays its looks).
# Usage: scripts/price_arms.sh [RECIPE ...]   (default: parcae sampled-depth curriculum)
# To keep editing this checkout while the arms train, run them from a frozen copy of the code:
#   git worktree add ../armcode HEAD
#   REPO=$PWD PYTHONPATH=../armcode/src bash ../armcode/scripts/price_arms.sh
set -uo pipefail
cd "${REPO:-$(dirname "$0")/..}"
loopscale=${LOOPSCALE:-.venv/bin/loopscale}
every=${COMMIT_EVERY_S:-600}
hours=${HOURS:-0.45}
recipes=("${@:-parcae sampled-depth curriculum}")
read -r -a recipes <<< "${recipes[*]}"

commit_all() {
  for recipe in "${recipes[@]}"; do
    dir=results/laptop-$recipe
    [ -f "$dir/sweep.yaml" ] || continue
    bash scripts/commit_sweep.sh "$dir" "Price progress: $dir" || echo "price_arms: commit of $dir failed; retried next round" >&2
  done
}

( while sleep "$every"; do commit_all; done ) &
committer=$!
trap 'kill $committer 2>/dev/null; commit_all' EXIT

for recipe in "${recipes[@]}"; do
  echo "price_arms: $recipe → results/laptop-$recipe ($(date -u +%FT%TZ))"
  "$loopscale" price "$recipe" --reuse results/laptop-factorial --out "results/laptop-$recipe" --max-hours "$hours" \
    || { echo "price_arms: $recipe stopped ($?)" >&2; exit 3; }
  commit_all
done
