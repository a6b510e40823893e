#!/usr/bin/env bash
# Start a single-node Slurm on this machine for the tests (docs/sweep.md, "Slurm"): munged, slurmctld and slurmd
# in the background, as root, with a minimal slurm.conf that declares four fake GPUs as GRES (files under
# $SLURM_CI_DIR/dev stand for the devices: Slurm hands their indices to a job in CUDA_VISIBLE_DEVICES).
# Installs Debian's slurm-wlm and munge when missing. Idempotent: a second call finds the daemons up and exits 0.
# Prints the configuration's path (export SLURM_CONF=...) on stdout; exit 1 with the reason when Slurm cannot start.
set -euo pipefail
dir=${SLURM_CI_DIR:-/tmp/patchlane-slurm}
conf=$dir/slurm.conf
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm-up: installing slurm-wlm and munge (Debian's packages)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >&2
fi
mkdir -p "$dir"/{spool/ctld,spool/d,log,dev} /run/munge /var/lib/munge /var/log/munge /etc/munge
# Character devices (the same major/minor as /dev/null): slurmd accepts no regular file as a GPU.
for i in 0 1 2 3; do [ -c "$dir/dev/gpu$i" ] || { rm -f "$dir/dev/gpu$i"; mknod "$dir/dev/gpu$i" c 1 3; }; done
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; }
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || munged --force
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
cat > "$conf" <<CONF
ClusterName=patchlane-ci
SlurmctldHost=$host
MpiDefault=none
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/d
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=3600
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$host CPUs=$cpus RealMemory=$mem Gres=gpu:4 State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
cat > "$dir/gres.conf" <<CONF
NodeName=$host Name=gpu File=$dir/dev/gpu[0-3]
CONF
export SLURM_CONF=$conf
if ! scontrol ping 2>/dev/null | grep -q UP; then
    slurmctld -f "$conf" -i
fi
pgrep -x slurmd >/dev/null || slurmd -f "$conf"
for _ in $(seq 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        echo "$conf"
        exit 0
    fi
    sleep 0.5
done
echo "slurm-up: the node did not come up within 30 s; sinfo says: $(sinfo -h -o '%T %E' 2>&1 | head -1); see $dir/log" >&2
exit 1
