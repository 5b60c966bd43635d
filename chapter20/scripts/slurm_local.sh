#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for running ddp_demo.sbatch for real (§20.4.2).
#
#   bash chapter20/scripts/slurm_local.sh start    # install (Debian packages) if needed, start
#   bash chapter20/scripts/slurm_local.sh status   # sinfo
#   bash chapter20/scripts/slurm_local.sh stop     # stop the daemons this script started
#
# Needs root and Debian's packages slurm-wlm and munge (installed with apt-get when missing).
# The node is this host with all its CPUs, in one partition "local"; the daemons run as root
# with plain process tracking (no cgroups, as in a container). An existing slurm.conf that this
# script did not write is left alone.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
MARK="# written by chapter20/scripts/slurm_local.sh"
STATE=/var/lib/chapter20-slurm

need_root() {
	if [[ $(id -u) -ne 0 ]]; then
		echo "slurm_local.sh: $1 needs root (apt-get, daemons under /var)" >&2
		exit 1
	fi
}

install() {
	if command -v sbatch >/dev/null && command -v slurmctld >/dev/null &&
		command -v slurmd >/dev/null && command -v munged >/dev/null; then
		return
	fi
	need_root "installing slurm-wlm and munge"
	echo "== installing slurm-wlm and munge (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

write_conf() {
	if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
		echo "== keeping the existing $CONF (not written by this script)"
		return
	fi
	local host cpus memory
	host=$(hostname -s)
	cpus=$(nproc)
	memory=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10))
	mkdir -p /etc/slurm "$STATE/ctld" "$STATE/d" /var/log/slurm
	cat >"$CONF" <<EOF
$MARK
ClusterName=chapter20
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

running() { pgrep -x "$1" >/dev/null; }

start() {
	install
	need_root "starting munged, slurmctld and slurmd"
	write_conf
	if ! running munged; then
		mkdir -p /run/munge && chown munge:munge /run/munge
		[[ -s /etc/munge/munge.key ]] || { mungekey --create 2>/dev/null || create-munge-key -f; }
		su -s /bin/sh munge -c "munged"
	fi
	running slurmctld || slurmctld
	running slurmd || slurmd
	local state=""
	for _ in $(seq 1 60); do
		state=$(sinfo -h -o %T 2>/dev/null | head -n 1 || true)
		if [[ $state == idle* || $state == mixed* || $state == allocated* ]]; then
			echo "== SLURM is up: $(sinfo -h -o '%P %D node(s) %c CPUs %T')"
			return
		fi
		if [[ $state == down* || $state == drain* ]]; then
			scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true
		fi
		sleep 1
	done
	echo "slurm_local.sh: the node did not become idle (state: ${state:-none});" \
		"see /var/log/slurm/" >&2
	exit 1
}

stop() {
	local name pidfile
	for name in slurmd slurmctld; do
		pidfile=$STATE/$name.pid
		if [[ -s $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
			kill "$(cat "$pidfile")"
		fi
	done
	echo "== stopped slurmd and slurmctld (munged left running)"
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
status) sinfo ;;
*)
	echo "usage: $0 install|start|status|stop" >&2
	exit 2
	;;
esac
