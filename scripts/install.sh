#!/bin/sh
# Installs edgeplane on this host from a local binary: the binary, a systemd
# unit (or an OpenRC service when there is no systemd), an env file, a
# default config file, a kubectl link and edgeplane-uninstall.sh. With
# EDGEPLANE_SERVER and EDGEPLANE_TOKEN it installs an agent (a node joining
# that server) instead of a server: the edgeplane-agent service.
#
#   sudo sh install.sh [--dry-run]
#   sudo EDGEPLANE_SERVER=https://HOST:6443 EDGEPLANE_TOKEN=K10... sh install.sh
#
# The binary is $EDGEPLANE_BINARY, else, next to this script (a release
# folder made by `make dist`, or a checkout after `make build`):
# edgeplane-linux-<arch>, edgeplane, ../bin/edgeplane or ../dist/edgeplane-linux-<arch>.
# Nothing is downloaded. Running it again changes nothing unless an input did.
# On a host with no container runtime, the release folder's
# runtime-linux-<arch>.tar.gz (containerd, runc, ctr, crictl; make dist) is
# installed beside the binary and its CNI plugins in /opt/cni/bin; a file
# there that install.sh did not write is kept.
#
# Environment:
#   EDGEPLANE_BINARY   the binary to install
#   EDGEPLANE_SERVER   agent: URL of a server of the cluster, https://HOST[:PORT]
#   EDGEPLANE_TOKEN    agent: node token from that server, K10<ca-hash>::<id>.<secret>
#                      (both unset on a host with an agent: the installed ones)
#   EDGEPLANE_ROOT     install every file under this directory (for tests and
#                      images); the service is then not started
#   EDGEPLANE_INIT     systemd or openrc (default: systemd when it runs, else openrc)
#   EDGEPLANE_BIN_DIR  where the binary goes (default /usr/local/bin)
#   EDGEPLANE_SKIP_START=true  write everything but do not start the service
#   EDGEPLANE_INSTALL_RUNTIME=false  do not install the shipped container runtime
set -eu

ROOT=${EDGEPLANE_ROOT:-}
ROOT=${ROOT%/}
BIN_DIR=${EDGEPLANE_BIN_DIR:-/usr/local/bin}
CONFIG_DIR=/etc/edgeplane
ENV_FILE=$CONFIG_DIR/edgeplane.env
CONFIG_FILE=$CONFIG_DIR/config.yaml
SYSTEMD_UNIT=/etc/systemd/system/edgeplane.service
OPENRC_SCRIPT=/etc/init.d/edgeplane
AGENT_ENV_FILE=$CONFIG_DIR/edgeplane-agent.env
AGENT_CONFIG_FILE=$CONFIG_DIR/agent.yaml
AGENT_SYSTEMD_UNIT=/etc/systemd/system/edgeplane-agent.service
AGENT_OPENRC_SCRIPT=/etc/init.d/edgeplane-agent
AGENT_LOG=/var/log/edgeplane-agent.log
CNI_BIN_DIR=/opt/cni/bin
RUNTIME_DIR=/usr/local/lib/edgeplane
RUNTIME_MANIFEST=$RUNTIME_DIR/runtime.files
RUNTIME_INSTALLED=false
TMP_DIRS=""
SERVER_URL=${EDGEPLANE_SERVER:-}
TOKEN=${EDGEPLANE_TOKEN:-}
NL='
'
DRY_RUN=false
CHANGED=false

usage() {
	sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
}

info() { printf '[edgeplane] %s\n' "$*"; }
warn() { printf '[edgeplane] warning: %s\n' "$*" >&2; }
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
	for candidate in "$SCRIPT_DIR/edgeplane-linux-$a" "$SCRIPT_DIR/edgeplane-linux-$a.xz" "$SCRIPT_DIR/edgeplane" \
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

# systemd_unit ROLE: the unit of `edgeplane server` or `edgeplane agent`.
systemd_unit() {
	desc="edgeplane: a Kubernetes control plane in one binary" after=network-online.target
	env=-$ENV_FILE args=server extra="" timeout=10min
	if [ "$1" = agent ]; then
		desc="edgeplane agent: a Kubernetes node joined to an edgeplane server"
		has_containerd_service systemd && after="$after containerd.service"
		# The token stays in the env file (0600), out of the unit and off the
		# command line (ps): the agent reads $EDGEPLANE_TOKEN itself.
		env=$AGENT_ENV_FILE args="agent --server \${EDGEPLANE_SERVER}"
		# Pods run in the container runtime and outlive an agent restart; a
		# first start registers the node (discovery, images, certificates).
		extra="Delegate=yes$NL" timeout=15min
	fi
	cat <<EOF
# Installed by edgeplane's install.sh; edgeplane-uninstall.sh removes it.
[Unit]
Description=$desc
Documentation=https://github.com/edgeplane/edgeplane
Wants=$after
After=$after

[Service]
Type=notify
EnvironmentFile=$env
ExecStart=$BIN_DIR/edgeplane $args
KillMode=process
${extra}Restart=on-failure
RestartSec=5s
LimitNOFILE=1048576
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
TimeoutStartSec=$timeout
TimeoutStopSec=2min

[Install]
WantedBy=multi-user.target
EOF
}

# openrc_script ROLE: the OpenRC service of `edgeplane server` or `edgeplane agent`.
openrc_script() {
	desc="edgeplane: a Kubernetes control plane in one binary" env=$ENV_FILE log=/var/log/edgeplane.log
	args=server after=firewall
	if [ "$1" = agent ]; then
		desc="edgeplane agent: a Kubernetes node joined to an edgeplane server" env=$AGENT_ENV_FILE log=$AGENT_LOG
		# Expanded when the service starts, after start_pre read the env file.
		args="agent --server \\\${EDGEPLANE_SERVER}"
		has_containerd_service openrc && after="$after containerd"
	fi
	cat <<EOF
#!/sbin/openrc-run
# Installed by edgeplane's install.sh; edgeplane-uninstall.sh removes it.
description="$desc"
command="$BIN_DIR/edgeplane"
command_args="$args"
supervisor=supervise-daemon
respawn_delay=5
respawn_max=0
output_log=$log
error_log=$log
rc_ulimit="-n 1048576"

depend() {
	need net
	after $after
}

start_pre() {
	if [ -f $env ]; then
		set -a
		. $env
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

# check_agent_env validates EDGEPLANE_SERVER and EDGEPLANE_TOKEN before
# anything is written, reporting every problem at once and nothing of the
# token. Both empty: the agent's env file's when an agent is installed (an
# upgrade), else a server install.
check_agent_env() {
	if [ -z "$SERVER_URL" ] && [ -z "$TOKEN" ] && [ -f "$ROOT$AGENT_ENV_FILE" ]; then
		SERVER_URL=$(sed -n 's/^EDGEPLANE_SERVER=//p' "$ROOT$AGENT_ENV_FILE" | tail -n 1)
		TOKEN=$(sed -n 's/^EDGEPLANE_TOKEN=//p' "$ROOT$AGENT_ENV_FILE" | tail -n 1)
		info "an agent is installed here: keeping the server and token of $AGENT_ENV_FILE (uninstall it first to install a server)"
	fi
	[ -z "$SERVER_URL" ] && [ -z "$TOKEN" ] && return 0
	problems=""
	if [ -z "$SERVER_URL" ]; then
		problems="EDGEPLANE_TOKEN is set but EDGEPLANE_SERVER is not: an agent needs both, EDGEPLANE_SERVER=https://HOST:6443 (a server of the cluster) and EDGEPLANE_TOKEN; unset EDGEPLANE_TOKEN to install a server"
	elif ! valid_server_url "$SERVER_URL"; then
		case $SERVER_URL in
		*"$NL"*) problems="EDGEPLANE_SERVER spans several lines: want one URL, https://HOST[:PORT]" ;;
		http://*) problems="EDGEPLANE_SERVER=$SERVER_URL: a server answers on HTTPS only, want https://HOST[:PORT], e.g. https://192.0.2.10:6443" ;;
		*) problems="EDGEPLANE_SERVER=$SERVER_URL is not a server URL: want https://HOST[:PORT] (port 1-65535) with no path, e.g. https://192.0.2.10:6443 or https://[2001:db8::1]:6443" ;;
		esac
	fi
	if [ -z "$TOKEN" ]; then
		problems="${problems:+$problems$NL}EDGEPLANE_SERVER is set but EDGEPLANE_TOKEN is not: an agent needs both; on a server, 'edgeplane token --node' prints one (or 'edgeplane token create' makes one), or unset EDGEPLANE_SERVER to install a server"
	elif ! matches "$TOKEN" '^K10[0-9a-f]{64}::[a-z0-9]{6}\.[a-z0-9]{16}$'; then
		if matches "$TOKEN" '^K10[0-9a-fA-F]*::server:'; then
			why="it is a server join token (K10...::server:...), which only servers join with"
		elif matches "$TOKEN" '^[a-z0-9]{6}\.[a-z0-9]{16}$'; then
			why="it is a bare bootstrap token, without the hash of the cluster CA that the agent checks the server against"
		else
			why="want K10<64 hex digits, lower case>::<6 characters a-z0-9>.<16 characters a-z0-9>"
		fi
		problems="${problems:+$problems$NL}EDGEPLANE_TOKEN is not a node token: $why; on a server, 'edgeplane token --node' prints one (or 'edgeplane token create' makes one)"
	fi
	if [ -n "$problems" ]; then
		printf '%s\n' "$problems" | while IFS= read -r line; do
			printf '[edgeplane] error: %s\n' "$line" >&2
		done
		exit 1
	fi
	SERVER_URL=${SERVER_URL%/}
}

# matches STRING ERE: STRING is one line matching the extended regexp.
matches() {
	case $1 in *"$NL"*) return 1 ;; esac
	printf '%s\n' "$1" | grep -Eq -- "$2"
}

# valid_server_url: https://HOST[:PORT][/], HOST a DNS name, an IPv4 address
# or a bracketed IPv6 address, PORT 1-65535.
valid_server_url() {
	matches "$1" '^https://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)(:[0-9]{1,5})?/?$' || return 1
	hostport=${1#https://}
	hostport=${hostport%/}
	case $hostport in
	*\]) return 0 ;;
	*\]:*) port=${hostport##*]:} ;;
	*:*) port=${hostport##*:} ;;
	*) return 0 ;;
	esac
	[ "$port" -ge 1 ] && [ "$port" -le 65535 ]
}

# new_tmp_dir sets TMP_DIR to a new directory, removed when the script exits.
new_tmp_dir() {
	TMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/edgeplane.XXXXXX") || fatal "cannot make a temporary directory"
	TMP_DIRS="$TMP_DIRS $TMP_DIR"
}

# ours PATH: install.sh wrote PATH (a path on the target system) from a
# release's runtime tarball.
ours() {
	[ -f "$ROOT$RUNTIME_MANIFEST" ] && grep -qxF "$1" "$ROOT$RUNTIME_MANIFEST"
}

# host_runtime prints the host's own container runtime (a binary or a
# socket; not one install.sh installed) and fails when there is none.
host_runtime() {
	for p in /usr/bin/containerd /usr/local/bin/containerd /usr/sbin/containerd /usr/bin/crio /usr/local/bin/crio \
		/run/containerd/containerd.sock /run/crio/crio.sock /var/run/crio/crio.sock; do
		if { [ -x "$ROOT$p" ] || [ -S "$ROOT$p" ]; } && ! ours "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# install_runtime installs the release folder's runtime-linux-<arch>.tar.gz
# when the host has no container runtime of its own: its binaries beside
# edgeplane (where the managed containerd, `edgeplane crictl` and `edgeplane
# ctr` look first), its CNI plugins in /opt/cni/bin, its VERSIONS and the
# list of what was written in /usr/local/lib/edgeplane. A file install.sh
# did not write is kept.
install_runtime() {
	rt_tarball="$SCRIPT_DIR/runtime-linux-$(arch).tar.gz"
	[ -f "$rt_tarball" ] || return 0
	rt_name=$(basename "$rt_tarball" .tar.gz)
	if [ "${EDGEPLANE_INSTALL_RUNTIME:-}" = false ]; then
		info "EDGEPLANE_INSTALL_RUNTIME=false: not installing $rt_name"
		return 0
	fi
	if existing=$(host_runtime); then
		info "container runtime of the host: $existing; not installing $rt_name"
		return 0
	fi
	verify_checksum "$rt_tarball"
	new_tmp_dir
	tar -xzf "$rt_tarball" -C "$TMP_DIR" || fatal "unpacking $rt_tarball failed"
	rt_unpacked=$TMP_DIR/$rt_name
	[ -f "$rt_unpacked/SHA256SUMS" ] || fatal "$rt_tarball has no $rt_name/SHA256SUMS"
	(cd "$rt_unpacked" && sha256sum -c --quiet SHA256SUMS) >&2 || fatal "$rt_tarball: its files do not match its SHA256SUMS"
	info "installing the container runtime of $rt_name: $(awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }' "$rt_unpacked/VERSIONS")"
	written=""
	for f in "$rt_unpacked"/bin/* "$rt_unpacked"/cni/*; do
		case $f in
		*/cni/*) rt_dest=$CNI_BIN_DIR/$(basename "$f") ;;
		*) rt_dest=$BIN_DIR/$(basename "$f") ;;
		esac
		if { [ -e "$ROOT$rt_dest" ] || [ -L "$ROOT$rt_dest" ]; } && ! ours "$rt_dest"; then
			warn "kept $rt_dest, which install.sh did not write (the release's is not installed)"
			continue
		fi
		put_file "$f" "$rt_dest" 755
		written="$written$rt_dest$NL"
	done
	put_file "$rt_unpacked/VERSIONS" "$RUNTIME_DIR/VERSIONS" 644
	printf '%s' "$written" | put_text "$RUNTIME_MANIFEST" 644
	RUNTIME_INSTALLED=true
	if [ -z "$ROOT" ] && ! $DRY_RUN; then
		for b in containerd runc; do
			ours "$BIN_DIR/$b" || continue
			"$BIN_DIR/$b" --version >/dev/null 2>&1 ||
				warn "$BIN_DIR/$b does not run here: the shipped runtime is Debian 12's (glibc 2.36, libseccomp2); install the distribution's containerd and runc instead"
		done
	fi
}

# check_node_host warns (the agent still installs) when the host lacks a
# container runtime or the CNI plugins a node's pod network needs.
check_node_host() {
	if $RUNTIME_INSTALLED; then
		info "container runtime and CNI plugins: the release's ($RUNTIME_DIR/VERSIONS)"
		return 0
	fi
	runtime=$(host_runtime) || runtime=""
	if [ -n "$runtime" ]; then
		info "container runtime: $runtime"
	else
		warn "no container runtime (containerd or CRI-O: no binary, no socket): the node runs no pods until one is installed: apt-get install containerd containernetworking-plugins (another runtime: set container-runtime-endpoint in $AGENT_CONFIG_FILE)"
	fi
	partial=""
	for dir in /opt/cni/bin /usr/lib/cni; do
		missing=""
		for plugin in bridge host-local portmap loopback; do
			[ -x "$ROOT$dir/$plugin" ] || missing="${missing:+$missing, }$plugin"
		done
		if [ -z "$missing" ]; then
			info "CNI plugins: $dir"
			return 0
		fi
		if [ -z "$partial" ] && [ -d "$ROOT$dir" ]; then
			partial="$dir lacks $missing"
		fi
	done
	warn "CNI plugins missing: want bridge, host-local, portmap and loopback in /opt/cni/bin or /usr/lib/cni${partial:+ ($partial)}; pods get no network until they are installed: apt-get install containernetworking-plugins"
}

# has_containerd_service tells whether containerd has a service for init $1.
has_containerd_service() {
	case $1 in
	systemd)
		for d in /etc/systemd/system /lib/systemd/system /usr/lib/systemd/system /usr/local/lib/systemd/system; do
			[ -f "$ROOT$d/containerd.service" ] && return 0
		done
		;;
	openrc) [ -f "$ROOT/etc/init.d/containerd" ] && return 0 ;;
	esac
	return 1
}

agent_env_file() {
	cat <<EOF
# Environment of the edgeplane-agent service, one VAR=value a line, written by
# install.sh from EDGEPLANE_SERVER and EDGEPLANE_TOKEN (run it again to change
# them). Mode 0600: the token is a secret. Settings go in $AGENT_CONFIG_FILE.
EDGEPLANE_SERVER=$SERVER_URL
EDGEPLANE_TOKEN=$TOKEN
EOF
}

agent_config_file() {
	cat <<'EOF'
# edgeplane agent configuration. Keys are the long flags of
# `edgeplane agent --help`, lists for repeatable flags. Flags on the command
# line win; drop-ins in /etc/edgeplane/agent.yaml.d/*.yaml are read after
# this file, in name order. The server and the token are in
# /etc/edgeplane/edgeplane-agent.env.
#
#data-dir: /var/lib/edgeplane
#node-name: edge-1
#node-ip: 192.0.2.21
#node-label:
#  - topology.kubernetes.io/zone=shelf-1
#node-taint:
#  - dedicated=edge:NoSchedule
#container-runtime-endpoint: unix:///run/containerd/containerd.sock
#kubelet-arg:
#  - max-pods=50
EOF
}

# install_agent writes the agent's files for init system $1.
install_agent() {
	if [ -e "$ROOT$SYSTEMD_UNIT" ] || [ -e "$ROOT$OPENRC_SCRIPT" ]; then
		warn "an edgeplane server is installed here too: a server already runs this host as a node when it finds a container runtime; with an agent it would register twice"
	fi
	install_runtime
	check_node_host
	agent_env_file | put_text "$AGENT_ENV_FILE" 600
	if [ -e "$ROOT$AGENT_CONFIG_FILE" ]; then
		info "kept $AGENT_CONFIG_FILE"
	else
		agent_config_file | put_text "$AGENT_CONFIG_FILE" 600
	fi
	case $1 in
	systemd) systemd_unit agent | put_text "$AGENT_SYSTEMD_UNIT" 644 ;;
	openrc) openrc_script agent | put_text "$AGENT_OPENRC_SCRIPT" 755 ;;
	esac
}

main() {
	trap 'for d in $TMP_DIRS; do rm -rf "$d"; done' EXIT
	check_agent_env
	if [ -z "$ROOT" ] && ! $DRY_RUN && [ "$(id -u)" != 0 ]; then
		fatal "run as root (sudo sh $0), or set EDGEPLANE_ROOT, or pass --dry-run"
	fi
	$DRY_RUN && info "dry run: nothing is written"
	[ -n "$ROOT" ] && info "installing under EDGEPLANE_ROOT=$ROOT"
	service=edgeplane
	[ -n "$SERVER_URL" ] && service=edgeplane-agent

	bin=$(find_binary)
	verify_checksum "$bin"
	case $bin in
	*.xz)
		# A release's compressed binary (checked above, as shipped).
		command -v xz >/dev/null 2>&1 || fatal "$bin is xz-compressed and xz is not installed: apt-get install xz-utils, or unpack it elsewhere and set EDGEPLANE_BINARY"
		new_tmp_dir
		xz -dc "$bin" >"$TMP_DIR/edgeplane" || fatal "unpacking $bin failed"
		chmod 755 "$TMP_DIR/edgeplane"
		bin=$TMP_DIR/edgeplane
		;;
	esac
	"$bin" version >/dev/null 2>&1 || fatal "$bin does not run on this host ($(uname -m)): wrong architecture?"
	version=$("$bin" version | head -n 1)
	info "installing $version from $bin ($service)"

	put_file "$bin" "$BIN_DIR/edgeplane" 755
	[ -f "$SCRIPT_DIR/edgeplane-uninstall.sh" ] || fatal "edgeplane-uninstall.sh is missing next to $0"
	put_file "$SCRIPT_DIR/edgeplane-uninstall.sh" "$BIN_DIR/edgeplane-uninstall.sh" 755

	init=$(init_system)
	if [ "$service" = edgeplane-agent ]; then
		install_agent "$init"
	else
		install_server "$init"
	fi

	if $DRY_RUN; then
		info "would enable and start the $init service $service"
	elif [ -n "$ROOT" ] || [ "${EDGEPLANE_SKIP_START:-}" = true ]; then
		info "not starting the service (EDGEPLANE_ROOT or EDGEPLANE_SKIP_START)"
	else
		start_service "$init" "$service"
	fi
	if [ "$service" = edgeplane-agent ]; then
		info "done: the edgeplane-agent service joins this host to $SERVER_URL as a node; 'kubectl get nodes' on a server shows it once it is Ready"
	else
		info "done: 'edgeplane check' checks this host; 'kubectl get ns' (or 'edgeplane kubectl get ns') as root once it is ready"
	fi
}

# install_server writes the server's files for init system $1.
install_server() {
	if existing=$(other_kubectl); then
		info "kubectl found at $existing: not linking; use 'edgeplane kubectl'"
	else
		put_link edgeplane "$BIN_DIR/kubectl"
	fi
	# A server is also its own node when it has a container runtime.
	install_runtime

	env_file | put_text "$ENV_FILE" 600
	if [ -e "$ROOT$CONFIG_FILE" ]; then
		info "kept $CONFIG_FILE"
	else
		config_file | put_text "$CONFIG_FILE" 600
	fi

	case $1 in
	systemd) systemd_unit server | put_text "$SYSTEMD_UNIT" 644 ;;
	openrc) openrc_script server | put_text "$OPENRC_SCRIPT" 755 ;;
	esac
}

# start_service enables service $2 of init system $1; it restarts it only
# when a file changed.
start_service() {
	case $1 in
	systemd)
		systemctl daemon-reload
		systemctl enable "$2.service" >/dev/null
		if $CHANGED; then
			systemctl restart "$2.service"
			info "restarted $2.service"
		else
			systemctl start "$2.service"
			info "$2.service is running"
		fi
		;;
	openrc)
		command -v rc-update >/dev/null 2>&1 || {
			info "neither systemd nor OpenRC runs here: start the $2 service's command yourself (see $OPENRC_SCRIPT${2#edgeplane})"
			return 0
		}
		rc-update add "$2" default >/dev/null
		if $CHANGED; then
			rc-service "$2" restart
		else
			rc-service "$2" start
		fi
		;;
	esac
}

main
