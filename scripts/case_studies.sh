#!/usr/bin/env bash
# The laptop case studies (docs/sweeps.md, "Case studies"), resumable from any point: the base sweep's d = 80
# column (results/laptop-factorial grows by the `laptop` preset's `wide` group), then the truncated-BPTT arm,
# then the hyperconnections arm; each arm reuses the base's r = 1 runs. Every COMMIT_EVERY_S seconds (and at
# the end) each sweep's finished runs are committed with scripts/commit_sweep.sh, so a session that ends
# loses only runs in flight; rerunning this script resumes where it stopped.
# Usage: scripts/case_studies.sh   (needs `loopscale data prepare --vocab 1024 --seq-len 128` first)
# To keep editing this checkout while the sweeps train, run them from a frozen copy of the code:
#   git worktree add ../sweepcode HEAD
#   REPO=$PWD PYTHONPATH=../sweepcode/src bash ../sweepcode/scripts/case_studies.sh
# (REPO: the checkout whose results/ and git history receive the runs; default: this script's own.)
set -uo pipefail
cd "${REPO:-$(dirname "$0")/..}"
loopscale=${LOOPSCALE:-.venv/bin/loopscale}
every=${COMMIT_EVERY_S:-600}
sweeps=(laptop:results/laptop-factorial laptop-truncated-bptt:results/laptop-truncated-bptt
  laptop-hyperconnections:results/laptop-hyperconnections)

commit_all() {
  for item in "${sweeps[@]}"; do
    dir=${item#*:}
    [ -f "$dir/sweep.yaml" ] || continue
    # a commit refused because another git command holds the index lock is retried next round
    bash scripts/commit_sweep.sh "$dir" || echo "case_studies: commit of $dir failed; retried next round" >&2
  done
}

( while sleep "$every"; do commit_all; done ) &
committer=$!
trap 'kill $committer 2>/dev/null; commit_all' EXIT

for item in "${sweeps[@]}"; do
  preset=${item%%:*} dir=${item#*:}
  echo "case_studies: $preset → $dir ($(date -u +%FT%TZ))"
  "$loopscale" sweep --preset "$preset" --out "$dir" || { echo "case_studies: $preset stopped ($?)" >&2; exit 3; }
  commit_all
done
