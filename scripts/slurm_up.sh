#!/usr/bin/env bash
# Start a single-node SLURM cluster on this machine for the sweep tests (see docs/sweeps.md, "SLURM").
#
#   scripts/slurm_up.sh [STATE_DIR]      (default /tmp/loopscale-slurm; needs root, Debian/Ubuntu)
#
# Installs slurmctld, slurmd, slurm-client and munge from Debian when missing, starts munged, writes
# STATE_DIR/slurm.conf, puts a small `sacct` stand-in in STATE_DIR/bin (submitit polls sacct; without
# slurmdbd it answers from `squeue -t all`, and MinJobAge=3600 keeps finished jobs visible), starts
# slurmctld and slurmd in the background and waits until the node is idle. PIDs go to STATE_DIR/*.pid;
# scripts/slurm_down.sh STATE_DIR stops exactly those processes. Clients need:
#   export SLURM_CONF=STATE_DIR/slurm.conf PATH=STATE_DIR/bin:$PATH
set -euo pipefail
DIR=${1:-/tmp/loopscale-slurm}
[ "$(id -u)" = 0 ] || { echo "slurm_up.sh: needs root (installs packages, runs munged/slurmd)" >&2; exit 1; }

need=()
for pkg_bin in slurmctld:slurmctld slurmd:slurmd slurm-client:sbatch munge:munged; do
  command -v "${pkg_bin#*:}" >/dev/null || need+=("${pkg_bin%%:*}")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
fi

mkdir -p "$DIR"/{state,spool,bin}
# munge: one daemon per machine; start it only when authentication does not work yet.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || /usr/sbin/create-munge-key -f; }
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged
  echo "$(cat /run/munge/munged.pid)" > "$DIR/munged.pid"
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

HOST=$(hostname -s)
NODE=$(slurmd -C | head -n1 | sed "s/^NodeName=[^ ]*/NodeName=$HOST NodeAddr=127.0.0.1/")
cat > "$DIR/slurm.conf" <<CONF
ClusterName=loopscale
SlurmctldHost=$HOST(127.0.0.1)
AuthType=auth/munge
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
KillWait=5
MinJobAge=3600
ReturnToService=2
MailProg=/bin/true
MpiDefault=none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.daemon.pid
SlurmdPidFile=$DIR/slurmd.daemon.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
$NODE
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

cat > "$DIR/bin/sacct" <<'SACCT'
#!/usr/bin/env bash
# sacct stand-in for submitit (no slurmdbd): `sacct -o JobID,State,NodeList --parsable2 -j ID[,ID...]`
ids=""
while [ $# -gt 0 ]; do case "$1" in -j) ids="$2"; shift 2;; *) shift;; esac; done
echo "JobID|State|NodeList"
squeue -r -t all -h -o '%i|%T|%N' | while IFS='|' read -r id state nodes; do
  for want in ${ids//,/ }; do
    if [ "$id" = "$want" ] || [ "${id%%_*}" = "$want" ]; then echo "$id|$state|$nodes"; fi
  done
done
SACCT
chmod +x "$DIR/bin/sacct"

export SLURM_CONF="$DIR/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" >"$DIR/slurmctld.out" 2>&1 &
echo $! > "$DIR/slurmctld.pid"
slurmd -D -f "$SLURM_CONF" >"$DIR/slurmd.out" 2>&1 &
echo $! > "$DIR/slurmd.pid"
for _ in $(seq 150); do
  state=$(sinfo -h -o '%t' 2>/dev/null | head -n1 || true)
  [ "$state" = "idle" ] && { echo "slurm up: SLURM_CONF=$SLURM_CONF PATH=$DIR/bin:\$PATH"; exit 0; }
  sleep 0.2
done
echo "slurm_up.sh: node did not become idle (state '${state:-none}'); see $DIR/slurmctld.log and $DIR/slurmd.log" >&2
exit 1
