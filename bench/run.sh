#!/usr/bin/env bash
# Builds edgeplane and the upstream baseline (kube-apiserver, etcd, kine) from
# the module versions in go.mod, stamped and stripped like `make build`, into
# bench/bin, then runs the benchmark driver (bench/cmd/bench). Arguments go to
# the driver: bench/run.sh -short (a smoke of a few minutes), bench/run.sh
# -configs upstream-etcd,edgeplane-sqlite -idle 2m, bench/run.sh -h.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
ldflags=$(./hack/ldflags.sh "$version")
mkdir -p bench/bin

build() { # output package
	local start=$SECONDS
	go build -ldflags "$ldflags" -o "bench/bin/$1" "$2"
	echo "built bench/bin/$1 in $((SECONDS - start)) s" >&2
}
build edgeplane ./cmd/edgeplane
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build etcd ./bench/cmd/etcd
build kine ./bench/cmd/kine
go build -o bench/bin/bench ./bench/cmd/bench

exec bench/bin/bench -bin bench/bin -cmd "${BENCH_COMMAND:-bench/run.sh $*}" "$@"
