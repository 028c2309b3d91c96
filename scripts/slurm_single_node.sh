#!/bin/bash
# Start a one-node Slurm cluster on this machine (as root), for the test of
# `normlab sweep --emit-slurm` (crates/normlab-cli/tests/slurm.rs). Needs the
# Debian packages slurm-wlm and munge. Does nothing when Slurm already
# answers; refuses to replace a slurm.conf it did not write.
set -euo pipefail
if sinfo -h >/dev/null 2>&1; then
  echo "slurm already running"; exit 0
fi
conf=/etc/slurm/slurm.conf
marker="# written by normlab scripts/slurm_single_node.sh"
if [ -e "$conf" ] && ! grep -qF "$marker" "$conf"; then
  echo "error: $conf exists and was not written by this script; not touching it" >&2; exit 1
fi
host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
# munge: a key, then the daemon as its own user.
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat > "$conf" <<CONF
$marker
ClusterName=normlab
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=normlab Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 60); do
  if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
    echo "slurm up: node $host, $cpus CPUs"; exit 0
  fi
  sleep 1
done
echo "error: slurm did not come up; see /var/log/slurm/" >&2
exit 1
