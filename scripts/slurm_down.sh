#!/usr/bin/env bash
# Stop the processes scripts/slurm_up.sh started (by their recorded PIDs) and cancel leftover jobs.
#   scripts/slurm_down.sh [STATE_DIR]    (default /tmp/loopscale-slurm)
set -u
DIR=${1:-/tmp/loopscale-slurm}
[ -f "$DIR/slurm.conf" ] && SLURM_CONF="$DIR/slurm.conf" scancel --full --user="$(id -un)" 2>/dev/null
for name in slurmd slurmctld munged; do
  pidfile="$DIR/$name.pid"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  rm -f "$pidfile"
done
exit 0
