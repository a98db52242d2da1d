#!/bin/sh
# Installs edgeplane on this host from a local binary: the binary, a systemd
# unit (or an OpenRC service when there is no systemd), an env file, a
# default config file, a kubectl link and edgeplane-uninstall.sh.
#
#   sudo sh install.sh [--dry-run]
#
# The binary is $EDGEPLANE_BINARY, else, next to this script (a release
# folder made by `make dist`, or a checkout after `make build`):
# edgeplane-linux-<arch>, edgeplane, ../bin/edgeplane or ../dist/edgeplane-linux-<arch>.
# Nothing is downloaded. Running it again changes nothing unless an input did.
#
# Environment:
#   EDGEPLANE_BINARY   the binary to install
#   EDGEPLANE_ROOT     install every file under this directory (for tests and
#                      images); the service is then not started
#   EDGEPLANE_INIT     systemd or openrc (default: systemd when it runs, else openrc)
#   EDGEPLANE_BIN_DIR  where the binary goes (default /usr/local/bin)
#   EDGEPLANE_SKIP_START=true  write everything but do not start the service
set -eu

ROOT=${EDGEPLANE_ROOT:-}
ROOT=${ROOT%/}
BIN_DIR=${EDGEPLANE_BIN_DIR:-/usr/local/bin}
CONFIG_DIR=/etc/edgeplane
ENV_FILE=$CONFIG_DIR/edgeplane.env
CONFIG_FILE=$CONFIG_DIR/config.yaml
SYSTEMD_UNIT=/etc/systemd/system/edgeplane.service
OPENRC_SCRIPT=/etc/init.d/edgeplane
DRY_RUN=false
CHANGED=false

usage() {
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
}

info() { printf '[edgeplane] %s\n' "$*"; }
fatal() {
	printf '[edgeplane] error: %s\n' "$*" >&2
	exit 1
}

for arg in "$@"; do
	case $arg in
	--dry-run) DRY_RUN=true ;;
	-h | --help)
		usage
		exit 0
		;;
	*) fatal "unknown argument $arg (try --help)" ;;
	esac
done

SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)

# arch maps the kernel's machine name to Go's.
arch() {
	case $(uname -m) in
	x86_64 | amd64) echo amd64 ;;
	aarch64 | arm64) echo arm64 ;;
	armv7* | armv8l) echo arm ;;
	*) fatal "unsupported architecture $(uname -m): edgeplane is built for amd64, arm64 and armv7" ;;
	esac
}

find_binary() {
	if [ -n "${EDGEPLANE_BINARY:-}" ]; then
		[ -f "$EDGEPLANE_BINARY" ] || fatal "EDGEPLANE_BINARY=$EDGEPLANE_BINARY is not a file"
		echo "$EDGEPLANE_BINARY"
		return
	fi
	a=$(arch)
	for candidate in "$SCRIPT_DIR/edgeplane-linux-$a" "$SCRIPT_DIR/edgeplane" \
		"$SCRIPT_DIR/../bin/edgeplane" "$SCRIPT_DIR/../dist/edgeplane-linux-$a"; do
		if [ -f "$candidate" ]; then
			echo "$candidate"
			return
		fi
	done
	fatal "no edgeplane binary for linux/$a next to $SCRIPT_DIR: set EDGEPLANE_BINARY=/path/to/edgeplane"
}

# verify_checksum checks the binary against a SHA256SUMS file beside it.
verify_checksum() {
	dir=$(dirname "$1")
	name=$(basename "$1")
	[ -f "$dir/SHA256SUMS" ] || return 0
	command -v sha256sum >/dev/null 2>&1 || return 0
	want=$(awk -v n="$name" '$2 == n || $2 == "*" n { print $1 }' "$dir/SHA256SUMS")
	[ -n "$want" ] || return 0
	got=$(sha256sum "$1" | awk '{ print $1 }')
	[ "$got" = "$want" ] || fatal "$1 does not match $dir/SHA256SUMS"
	info "checksum of $name matches SHA256SUMS"
}

# put_file SRC DEST MODE: install SRC as DEST unless DEST already has the
# same content and mode. DEST is a path on the target system.
put_file() {
	dest=$ROOT$2
	if [ -f "$dest" ] && [ ! -L "$dest" ] && cmp -s "$1" "$dest" && [ "$(stat -c %a "$dest")" = "$3" ]; then
		info "unchanged $2"
		return
	fi
	CHANGED=true
	if $DRY_RUN; then
		info "would write $2 (mode $3)"
		return
	fi
	mkdir -p "$(dirname "$dest")"
	tmp="$dest.tmp.$$"
	cp "$1" "$tmp"
	chmod "$3" "$tmp"
	mv -f "$tmp" "$dest"
	info "wrote $2"
}

# put_text DEST MODE: put_file with the content on stdin.
put_text() {
	tmp=$(mktemp)
	cat >"$tmp"
	put_file "$tmp" "$1" "$2"
	rm -f "$tmp"
}

# put_link TARGET DEST: make DEST a symbolic link to TARGET.
put_link() {
	dest=$ROOT$2
	if [ -L "$dest" ] && [ "$(readlink "$dest")" = "$1" ]; then
		info "unchanged $2 -> $1"
		return
	fi
	CHANGED=true
	if $DRY_RUN; then
		info "would link $2 -> $1"
		return
	fi
	mkdir -p "$(dirname "$dest")"
	ln -sfn "$1" "$dest"
	info "linked $2 -> $1"
}

# init_system picks systemd when it is running, else OpenRC.
init_system() {
	if [ -n "${EDGEPLANE_INIT:-}" ]; then
		case $EDGEPLANE_INIT in
		systemd | openrc) echo "$EDGEPLANE_INIT" ;;
		*) fatal "EDGEPLANE_INIT=$EDGEPLANE_INIT: want systemd or openrc" ;;
		esac
		return
	fi
	if [ -d /run/systemd/system ]; then
		echo systemd
	else
		echo openrc
	fi
}

# other_kubectl tells whether a kubectl other than our link is on the PATH
# (under ROOT).
other_kubectl() {
	old_ifs=$IFS
	IFS=:
	for dir in $PATH; do
		[ -n "$dir" ] || continue
		k=$ROOT$dir/kubectl
		if [ -L "$k" ] && [ "$(readlink "$k")" = edgeplane ] && [ "$dir" = "$BIN_DIR" ]; then
			continue
		fi
		if [ -e "$k" ] || [ -L "$k" ]; then
			IFS=$old_ifs
			echo "$dir/kubectl"
			return 0
		fi
	done
	IFS=$old_ifs
	return 1
}

systemd_unit() {
	cat <<EOF
# Installed by edgeplane's install.sh; edgeplane-uninstall.sh removes it.
[Unit]
Description=edgeplane: a Kubernetes control plane in one binary
Documentation=https://github.com/edgeplane/edgeplane
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
EnvironmentFile=-$ENV_FILE
ExecStart=$BIN_DIR/edgeplane server
KillMode=process
Restart=on-failure
RestartSec=5s
LimitNOFILE=1048576
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
TimeoutStartSec=10min
TimeoutStopSec=2min

[Install]
WantedBy=multi-user.target
EOF
}

openrc_script() {
	cat <<EOF
#!/sbin/openrc-run
# Installed by edgeplane's install.sh; edgeplane-uninstall.sh removes it.
description="edgeplane: a Kubernetes control plane in one binary"
command="$BIN_DIR/edgeplane"
command_args="server"
supervisor=supervise-daemon
respawn_delay=5
respawn_max=0
output_log=/var/log/edgeplane.log
error_log=/var/log/edgeplane.log
rc_ulimit="-n 1048576"

depend() {
	need net
	after firewall
}

start_pre() {
	if [ -f $ENV_FILE ]; then
		set -a
		. $ENV_FILE
		set +a
	fi
}
EOF
}

env_file() {
	cat <<'EOF'
# Environment of the edgeplane service, one VAR=value a line.
# Server settings belong in /etc/edgeplane/config.yaml.
# Examples:
#GOMEMLIMIT=400MiB
#HTTPS_PROXY=http://proxy.example:3128
#NO_PROXY=127.0.0.1,localhost,10.0.0.0/8
EOF
}

config_file() {
	cat <<'EOF'
# edgeplane server configuration. Keys are the long flags of
# `edgeplane server --help`, lists for repeatable flags. Flags on the command
# line win; drop-ins in /etc/edgeplane/config.yaml.d/*.yaml are read after
# this file, in name order. `edgeplane check` checks the host for it.
#
#data-dir: /var/lib/edgeplane
#datastore: sqlite
#https-port: 6443
#tls-san:
#  - edge.example.com
EOF
}

main() {
	if [ -z "$ROOT" ] && ! $DRY_RUN && [ "$(id -u)" != 0 ]; then
		fatal "run as root (sudo sh $0), or set EDGEPLANE_ROOT, or pass --dry-run"
	fi
	$DRY_RUN && info "dry run: nothing is written"
	[ -n "$ROOT" ] && info "installing under EDGEPLANE_ROOT=$ROOT"

	bin=$(find_binary)
	verify_checksum "$bin"
	"$bin" version >/dev/null 2>&1 || fatal "$bin does not run on this host ($(uname -m)): wrong architecture?"
	version=$("$bin" version | head -n 1)
	info "installing $version from $bin"

	put_file "$bin" "$BIN_DIR/edgeplane" 755
	[ -f "$SCRIPT_DIR/edgeplane-uninstall.sh" ] || fatal "edgeplane-uninstall.sh is missing next to $0"
	put_file "$SCRIPT_DIR/edgeplane-uninstall.sh" "$BIN_DIR/edgeplane-uninstall.sh" 755

	if existing=$(other_kubectl); then
		info "kubectl found at $existing: not linking; use 'edgeplane kubectl'"
	else
		put_link edgeplane "$BIN_DIR/kubectl"
	fi

	env_file | put_text "$ENV_FILE" 600
	if [ -e "$ROOT$CONFIG_FILE" ]; then
		info "kept $CONFIG_FILE"
	else
		config_file | put_text "$CONFIG_FILE" 600
	fi

	init=$(init_system)
	case $init in
	systemd) systemd_unit | put_text "$SYSTEMD_UNIT" 644 ;;
	openrc) openrc_script | put_text "$OPENRC_SCRIPT" 755 ;;
	esac

	if $DRY_RUN; then
		info "would enable and start the $init service"
	elif [ -n "$ROOT" ] || [ "${EDGEPLANE_SKIP_START:-}" = true ]; then
		info "not starting the service (EDGEPLANE_ROOT or EDGEPLANE_SKIP_START)"
	else
		start_service "$init"
	fi
	info "done: 'edgeplane check' checks this host; 'kubectl get ns' (or 'edgeplane kubectl get ns') as root once it is ready"
}

# start_service enables the service; it restarts it only when a file changed.
start_service() {
	case $1 in
	systemd)
		systemctl daemon-reload
		systemctl enable edgeplane.service >/dev/null
		if $CHANGED; then
			systemctl restart edgeplane.service
			info "restarted edgeplane.service"
		else
			systemctl start edgeplane.service
			info "edgeplane.service is running"
		fi
		;;
	openrc)
		command -v rc-update >/dev/null 2>&1 || {
			info "neither systemd nor OpenRC runs here: start '$BIN_DIR/edgeplane server' yourself"
			return 0
		}
		rc-update add edgeplane default >/dev/null
		if $CHANGED; then
			rc-service edgeplane restart
		else
			rc-service edgeplane start
		fi
		;;
	esac
}

main
