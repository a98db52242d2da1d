#!/bin/sh
# Removes what edgeplane's install.sh installed: the service (systemd or
# OpenRC), the binary, the kubectl link, /etc/edgeplane and this script.
# The data dir (certificates and the datastore) stays unless asked for.
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
		sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
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

stop_service() {
	if [ -n "$ROOT" ] || $DRY_RUN; then
		$DRY_RUN && info "would stop and disable the edgeplane service"
		return 0
	fi
	if [ -f "$SYSTEMD_UNIT" ] && command -v systemctl >/dev/null 2>&1; then
		systemctl disable --now edgeplane.service >/dev/null 2>&1 || true
	fi
	if [ -f "$OPENRC_SCRIPT" ] && command -v rc-service >/dev/null 2>&1; then
		rc-service edgeplane stop >/dev/null 2>&1 || true
		rc-update del edgeplane default >/dev/null 2>&1 || true
	fi
}

main() {
	if [ -z "$ROOT" ] && ! $DRY_RUN && [ "$(id -u)" != 0 ]; then
		fatal "run as root, or set EDGEPLANE_ROOT, or pass --dry-run"
	fi
	stop_service
	remove "$SYSTEMD_UNIT" "$OPENRC_SCRIPT" "$OPENRC_LOG"
	if [ -z "$ROOT" ] && ! $DRY_RUN && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	# The kubectl link only if it is ours.
	if [ -L "$ROOT$BIN_DIR/kubectl" ] && [ "$(readlink "$ROOT$BIN_DIR/kubectl")" = edgeplane ]; then
		remove "$BIN_DIR/kubectl"
	fi
	remove "$BIN_DIR/edgeplane" "$CONFIG_DIR"
	if $DELETE_DATA; then
		remove "$DATA_DIR"
	elif [ -e "$ROOT$DATA_DIR" ]; then
		info "kept the data dir $DATA_DIR (pass --delete-data to remove it)"
	fi
	remove "$BIN_DIR/edgeplane-uninstall.sh"
}

main
