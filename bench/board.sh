#!/usr/bin/env bash
# The board benchmark (bench/cmd/board, docs/PERFORMANCE.md "The board
# benchmark"): builds edgeplane (stamped like `make build`), the driver and
# the CoreDNS test binary into bench/bin, then runs the driver as root.
# Arguments go to the driver:
#
#   bench/board.sh                                   # every configuration, 30 idle minutes each
#   bench/board.sh -configs edgeplane:256:small -idle 3m
#   BOARD_IDLE=2m bench/board.sh                     # the idle window from the environment
#
# BOARD_LOCK: a file to hold an flock on while the driver runs (the e2e
# tests' /tmp/edgeplane-e2e.lock on a shared test host); the builds run
# before it is taken.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
ldflags=$(./hack/ldflags.sh "$version")
mkdir -p bench/bin
go build -ldflags "$ldflags" -o bench/bin/edgeplane ./cmd/edgeplane
go build -o bench/bin/board ./bench/cmd/board
(cd internal/testing/testimage/coredns &&
	GOWORK=off GOFLAGS='-mod=readonly -buildvcs=false' go build -trimpath -ldflags='-s -w' -o ../../../../bench/bin/coredns .)

args=(-bin bench/bin/edgeplane -coredns bench/bin/coredns -version "$version")
[[ -n ${BOARD_IDLE:-} ]] && args+=(-idle "$BOARD_IDLE")
if [[ -n ${BOARD_LOCK:-} ]]; then
	exec flock "$BOARD_LOCK" bench/bin/board "${args[@]}" "$@"
fi
exec bench/bin/board "${args[@]}" "$@"
