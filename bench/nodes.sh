#!/usr/bin/env bash
# Simulated nodes at scale (issue 28): for each configuration and each N, a
# fresh control plane on loopback, N simulated nodes (bench/cmd/nodes) that
# join it with its node token, PODS pods per node, then the control plane's
# RSS, CPU, disk writes, datastore size, Lease latency and pod-list latency
# over a window. Prints one table and leaves the JSON lines in $OUT.
#
#   bench/nodes.sh                                  # defaults below
#   NODES="10 50" CONFIGS=edgeplane-sqlite-small WINDOW=5m bench/nodes.sh
#
# CONFIGS: edgeplane-sqlite-small, edgeplane-etcd-small, edgeplane-sqlite,
# edgeplane-etcd (edgeplane --profile default), upstream-kubeadm (upstream
# kube-apiserver + etcd + kube-controller-manager + kube-scheduler as
# bench/cmd/bench runs them; built into bench/bin from go.mod's versions
# when missing, as bench/run.sh builds them).
# KILL_AT: for this N, one node is killed at the end and the time to
# NotReady is measured. Every wait below is bounded.
# LIST_BURST: clients of a 30 s burst of unpaged pod lists in the middle of
# the window (bench/cmd/nodes -list-burst; 0: none). A burst run's CPU,
# writes and list figures are not idle ones.
# SIM: the node simulator: hollow (kubemark kubelets, a process each), lite
# (the kubelet's API requests without kubelet code, many nodes per process)
# or auto (hollow up to N = 100, lite above); the table's sim column says
# which ran each row.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0

NODES=${NODES:-10 50 100}
PODS=${PODS:-10}
CHURN=${CHURN:-0}
LIST_BURST=${LIST_BURST:-0}
WINDOW=${WINDOW:-3m}
SETTLE=${SETTLE:-45s}
KILL_AT=${KILL_AT:-100}
SIM=${SIM:-auto}
CONFIGS=${CONFIGS:-edgeplane-sqlite-small edgeplane-etcd-small upstream-kubeadm}
OUT=${OUT:-bench/nodes-results.jsonl}
# EDGEPLANE_ARGS: extra flags for every edgeplane server (a tuning's before/after).
read -r -a extra_args <<<"${EDGEPLANE_ARGS:-}"
# Short: the kubelet's and the fake runtime's unix sockets live below it.
WORK=${WORK:-/tmp/epn-$$}

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
ldflags=$(./hack/ldflags.sh "$version")
mkdir -p bench/bin "$WORK"
trap 'rm -rf "$WORK"' EXIT
: >"$OUT"
go build -ldflags "$ldflags" -o bench/bin/edgeplane ./cmd/edgeplane
go build -o bench/bin/nodes ./bench/cmd/nodes
if [[ " $CONFIGS " == *" upstream-"* ]]; then
	go build -o bench/bin/bench ./bench/cmd/bench
	for p in kube-apiserver kube-controller-manager kube-scheduler; do
		[[ -x bench/bin/$p ]] || go build -ldflags "$ldflags" -o "bench/bin/$p" "k8s.io/kubernetes/cmd/$p"
	done
	[[ -x bench/bin/etcd ]] || go build -ldflags "$ldflags" -o bench/bin/etcd ./bench/cmd/etcd
fi

# wait_for FILE PATTERN SECONDS: until FILE has a line matching PATTERN.
wait_for() {
	local i
	for ((i = 0; i < $3; i++)); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 1
	done
	echo "nodes.sh: no \"$2\" in $1 after $3 s" >&2
	tail -20 "$1" >&2
	return 1
}

# stop_pid PID: SIGTERM, then SIGKILL after 60 s.
stop_pid() {
	local i
	kill -TERM "$1" 2>/dev/null || return 0
	for ((i = 0; i < 60; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 1
	done
	kill -KILL "$1" 2>/dev/null || true
}

run_edgeplane() { # config N
	local cfg=$1 n=$2 ds=sqlite profile=small
	[[ $cfg == *etcd* ]] && ds=etcd
	[[ $cfg == *-small ]] || profile=default
	local dir=$WORK/$cfg-$n
	mkdir -p "$dir" && chmod 700 "$dir"
	bench/bin/edgeplane server --data-dir "$dir/data" --datastore "$ds" --profile "$profile" \
		--bind-address 127.0.0.1 --advertise-address 192.0.2.10 --https-port 0 --disable=kubelet \
		${extra_args[@]+"${extra_args[@]}"} >"$dir/edgeplane.log" 2>&1 &
	local pid=$!
	wait_for "$dir/edgeplane.log" "edgeplane ready in" 180 || { stop_pid $pid; return 1; }
	wait_for "$dir/data/node-token" "::" 30 || { stop_pid $pid; return 1; }
	local kill=()
	[[ $n == "$KILL_AT" ]] && kill=(-kill)
	local rc=0
	bench/bin/nodes -data-dir "$dir/data" -pids "$pid" -datastore-dir "$dir/data/db" \
		-n "$n" -pods-per-node "$PODS" -churn "$CHURN" -list-burst "$LIST_BURST" -duration "$WINDOW" -settle "$SETTLE" \
		-work-dir "$dir/nodes" -label "$cfg" -out "$OUT" -sim "$SIM" "${kill[@]}" || rc=$?
	stop_pid $pid
	return $rc
}

run_upstream() { # config N
	local cfg=$1 n=$2
	local dir=$WORK/$cfg-$n
	mkdir -p "$dir"
	bench/bin/bench -bin bench/bin -serve "$cfg" -serve-dir "$dir/data" >"$dir/serve.log" 2>&1 &
	local pid=$!
	wait_for "$dir/serve.log" "^serving " 180 || { stop_pid $pid; return 1; }
	local pids
	pids=$(sed -n 's/^serving .* pids=\([0-9,]*\) .*/\1/p' "$dir/serve.log" | head -1)
	local kill=()
	[[ $n == "$KILL_AT" ]] && kill=(-kill)
	local rc=0
	bench/bin/nodes -data-dir "$dir/data" -pids "$pids" -datastore-dir "$dir/data/etcd" \
		-n "$n" -pods-per-node "$PODS" -churn "$CHURN" -list-burst "$LIST_BURST" -duration "$WINDOW" -settle "$SETTLE" \
		-work-dir "$dir/nodes" -label "$cfg" -out "$OUT" -sim "$SIM" "${kill[@]}" || rc=$?
	stop_pid $pid
	return $rc
}

echo "nodes.sh: $(date -u +%FT%TZ) configs=[$CONFIGS] N=[$NODES] sim=$SIM pods/node=$PODS churn=$CHURN list-burst=$LIST_BURST window=$WINDOW load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
failed=0
for n in $NODES; do
	for cfg in $CONFIGS; do
		echo "nodes.sh: $cfg N=$n (load $(cut -d' ' -f1 /proc/loadavg))" >&2
		case $cfg in
		upstream-*) run_upstream "$cfg" "$n" || failed=1 ;;
		*) run_edgeplane "$cfg" "$n" || failed=1 ;;
		esac
	done
done
bench/bin/nodes -table "$OUT"
exit $failed
