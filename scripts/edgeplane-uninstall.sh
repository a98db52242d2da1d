#!/bin/sh
# Removes what edgeplane's install.sh installed: the server's and the
# agent's services (systemd or OpenRC), the binary, the kubectl link, the
# shipped container runtime (the files install.sh lists in
# /usr/local/lib/edgeplane/runtime.files),
# /etc/edgeplane (env files, config.yaml, agent.yaml) and this script. The
# data dir (certificates, the datastore, a node's images and pods' data)
# stays unless asked for; what is mounted under it is unmounted first.
#
#   sudo edgeplane-uninstall.sh [--delete-data] [--dry-run]
#
# Environment:
#   EDGEPLANE_ROOT      remove under this directory, as install.sh wrote
#   EDGEPLANE_BIN_DIR   where the binary is (default /usr/local/bin)
#   EDGEPLANE_DATA_DIR  the data dir --delete-data removes (default /var/lib/edgeplane)
set -eu

ROOT=${EDGEPLANE_ROOT:-}
ROOT=${ROOT%/}
BIN_DIR=${EDGEPLANE_BIN_DIR:-/usr/local/bin}
DATA_DIR=${EDGEPLANE_DATA_DIR:-/var/lib/edgeplane}
CONFIG_DIR=/etc/edgeplane
SYSTEMD_UNIT=/etc/systemd/system/edgeplane.service
OPENRC_SCRIPT=/etc/init.d/edgeplane
OPENRC_LOG=/var/log/edgeplane.log
AGENT_SYSTEMD_UNIT=/etc/systemd/system/edgeplane-agent.service
AGENT_OPENRC_SCRIPT=/etc/init.d/edgeplane-agent
AGENT_LOG=/var/log/edgeplane-agent.log
RUNTIME_DIR=/usr/local/lib/edgeplane
RUNTIME_MANIFEST=$RUNTIME_DIR/runtime.files
DRY_RUN=false
DELETE_DATA=false

info() { printf '[edgeplane] %s\n' "$*"; }
fatal() {
	printf '[edgeplane] error: %s\n' "$*" >&2
	exit 1
}

for arg in "$@"; do
	case $arg in
	--dry-run) DRY_RUN=true ;;
	--delete-data) DELETE_DATA=true ;;
	-h | --help)
		sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) fatal "unknown argument $arg (try --help)" ;;
	esac
done

# remove PATH...: delete files or directories on the target system.
remove() {
	for p in "$@"; do
		if [ ! -e "$ROOT$p" ] && [ ! -L "$ROOT$p" ]; then
			continue
		fi
		if $DRY_RUN; then
			info "would remove $p"
		else
			rm -rf "$ROOT$p"
			info "removed $p"
		fi
	done
}

# stop_service stops and disables the service $1 (edgeplane or
# edgeplane-agent) when its unit $2 or OpenRC script $3 is installed.
stop_service() {
	if [ ! -e "$ROOT$2" ] && [ ! -e "$ROOT$3" ]; then
		return 0
	fi
	if [ -n "$ROOT" ] || $DRY_RUN; then
		$DRY_RUN && info "would stop and disable the $1 service"
		return 0
	fi
	if [ -f "$2" ] && command -v systemctl >/dev/null 2>&1; then
		systemctl disable --now "$1.service" >/dev/null 2>&1 || true
	fi
	if [ -f "$3" ] && command -v rc-service >/dev/null 2>&1; then
		rc-service "$1" stop >/dev/null 2>&1 || true
		rc-update del "$1" default >/dev/null 2>&1 || true
	fi
}

# unmount_under DIR: unmounts what is mounted under DIR on the target system
# (a node's pod volumes: tmpfs, bind mounts of host directories), deepest
# first, so that removing DIR never reaches into another file system.
unmount_under() {
	[ -r /proc/self/mountinfo ] || return 0
	awk -v d="$ROOT$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while IFS= read -r m; do
			if $DRY_RUN; then
				info "would unmount ${m#"$ROOT"}"
				continue
			fi
			umount "$m" 2>/dev/null || umount -l "$m" ||
				fatal "cannot unmount ${m#"$ROOT"}: the data dir $1 is kept; unmount it, then run this again"
			info "unmounted ${m#"$ROOT"}"
		done
}

main() {
	if [ -z "$ROOT" ] && ! $DRY_RUN && [ "$(id -u)" != 0 ]; then
		fatal "run as root, or set EDGEPLANE_ROOT, or pass --dry-run"
	fi
	agent=false
	if [ -e "$ROOT$AGENT_SYSTEMD_UNIT" ] || [ -e "$ROOT$AGENT_OPENRC_SCRIPT" ]; then
		agent=true
	fi
	stop_service edgeplane "$SYSTEMD_UNIT" "$OPENRC_SCRIPT"
	stop_service edgeplane-agent "$AGENT_SYSTEMD_UNIT" "$AGENT_OPENRC_SCRIPT"
	remove "$SYSTEMD_UNIT" "$OPENRC_SCRIPT" "$OPENRC_LOG" "$AGENT_SYSTEMD_UNIT" "$AGENT_OPENRC_SCRIPT" "$AGENT_LOG"
	if [ -z "$ROOT" ] && ! $DRY_RUN && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	# The kubectl link only if it is ours.
	if [ -L "$ROOT$BIN_DIR/kubectl" ] && [ "$(readlink "$ROOT$BIN_DIR/kubectl")" = edgeplane ]; then
		remove "$BIN_DIR/kubectl"
	fi
	remove "$BIN_DIR/edgeplane" "$CONFIG_DIR"
	# The shipped container runtime, as far as install.sh wrote it (its list).
	if [ -f "$ROOT$RUNTIME_MANIFEST" ]; then
		while IFS= read -r f; do
			case $f in /*) remove "$f" ;; esac
		done <"$ROOT$RUNTIME_MANIFEST"
		remove "$RUNTIME_DIR"
	fi
	if $DELETE_DATA; then
		unmount_under "$DATA_DIR"
		remove "$DATA_DIR"
	elif [ -e "$ROOT$DATA_DIR" ]; then
		info "kept the data dir $DATA_DIR (pass --delete-data to remove it)"
	fi
	remove "$BIN_DIR/edgeplane-uninstall.sh"
	if $agent; then
		info "the node's pods may still run in the container runtime: 'crictl rmp -af' (or a reboot) stops them; 'kubectl delete node NAME' on a server removes the node"
	fi
}

main
