#!/usr/bin/env bash
# A single-node SLURM on localhost for tests/test_slurm.py: Debian's slurmctld, slurmd and munge,
# one node with two stand-in GPUs (character devices like /dev/null: SLURM only needs files to
# hand out; nothing can run on them, so GPU jobs fail there with the kit's own sentence).
#   bash .ci/slurm-up.sh start   install if needed, configure, start the daemons, wait for the node
#   bash .ci/slurm-up.sh stop    stop the daemons this script started (by their process ids)
# Needs root. Exits non-zero with one line on stderr when SLURM cannot be set up; the test then
# skips and says why, so a machine without SLURM never turns CI red.
set -euo pipefail

STATE=/var/lib/kernelkit-slurm          # pid files and logs of this script's daemons
CONF=/etc/slurm                         # where Debian's clients look (SLURM_CONF default)
GPU_DEVICE=/dev/kkgpu                   # stand-in device files /dev/kkgpu0, /dev/kkgpu1

fail() { echo "slurm-up: $*" >&2; exit 1; }

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null && return 0
    command -v apt-get >/dev/null || fail "no apt-get to install slurmctld, slurmd, slurm-client, munge"
    timeout 180 apt-get update -q >"$STATE/apt.log" 2>&1 || fail "apt-get update failed (see $STATE/apt.log)"
    DEBIAN_FRONTEND=noninteractive timeout 180 apt-get install -y -q slurmctld slurmd slurm-client munge \
        >>"$STATE/apt.log" 2>&1 || fail "apt-get install slurmctld slurmd slurm-client munge failed (see $STATE/apt.log)"
}

write_config() {
    local host cpus memory
    host=$(hostname -s)
    cpus=$(nproc)
    # Leave 1 GiB to the system; jobs ask for mem_mb below this.
    memory=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
    mkdir -p "$CONF" /var/spool/slurmctld /var/spool/slurmd
    for index in 0 1; do
        [ -c "$GPU_DEVICE$index" ] || mknod "$GPU_DEVICE$index" c 1 3
    done
    cat >"$CONF/slurm.conf" <<EOF
# Written by kernelkit's .ci/slurm-up.sh: one node, no accounting database (sacct unavailable).
ClusterName=kernelkit
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
# Finished jobs stay visible to squeue and scontrol for 10 minutes: the executor plugin follows
# jobs with squeue when there is no accounting, and the test reads each job's record afterwards.
MinJobAge=600
NodeName=$host CPUs=$cpus RealMemory=$memory Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    echo "Name=gpu File=${GPU_DEVICE}[0-1]" >"$CONF/gres.conf"
    [ -f /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key && chown munge:munge /etc/munge/munge.key; }
    chmod 400 /etc/munge/munge.key
}

start() {
    mkdir -p "$STATE"
    install_packages
    write_config
    mkdir -p /run/munge && chown munge:munge /run/munge
    if ! munge -n </dev/null >/dev/null 2>&1; then
        runuser -u munge -- munged --pid-file=/run/munge/munged.pid || fail "munged did not start"
        cp /run/munge/munged.pid "$STATE/munged.pid"
    fi
    slurmctld || fail "slurmctld did not start (see $STATE/slurmctld.log)"
    slurmd || fail "slurmd did not start (see $STATE/slurmd.log)"
    local state=""
    for _ in $(seq 60); do
        state=$(sinfo --noheader --format=%T 2>/dev/null || true)
        [ "$state" = idle ] && { echo "slurm-up: node $(hostname -s) idle with gres $(sinfo --noheader --format=%G)"; return 0; }
        sleep 1
    done
    fail "the node did not become idle within 60 s (state '$state'; see $STATE/slurmctld.log and $STATE/slurmd.log)"
}

stop() {
    scontrol shutdown >/dev/null 2>&1 || true
    for daemon in slurmd slurmctld munged; do
        local pidfile="$STATE/$daemon.pid"
        [ -f "$pidfile" ] || continue
        local pid
        pid=$(cat "$pidfile")
        for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) fail "usage: $0 start|stop" ;;
esac
