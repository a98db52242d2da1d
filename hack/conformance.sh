#!/usr/bin/env bash
# make conformance: the upstream [Conformance] suite on a two-node edgeplane
# cluster (docs/CONFORMANCE.md).
#
#   1. builds, into $CONFORMANCE_DIR (kept between runs; a part that is there
#      is not built again): e2e.test, ginkgo and kubectl of go.mod's
#      Kubernetes version, and the images the specs run (test/conformance);
#   2. runs TestConformance (test/e2e/conformance_test.go) once per phase,
#      each under the host's e2e lock (/tmp/edgeplane-e2e.lock) on its own:
#      a server and an agent, each in a network namespace with its own
#      containerd, a read-only registry of the images as their mirror; the
#      parallel specs, then the [Serial] ones; prints the table and writes
#      it to $CONFORMANCE_DIR/runs/<datastore>-<time>/summary.md.
#
# CONFORMANCE_DATASTORE=sqlite (default) or etcd. CONFORMANCE_FOCUS=REGEXP
# runs only the specs it matches; CONFORMANCE_PHASES=parallel or serial runs
# one phase. Needs root, containerd, runc, the CNI plugins, gcc and make.
set -euo pipefail
cd "$(dirname "$0")/.."

export CGO_ENABLED=0
kube=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' go.mod)
dir=${CONFORMANCE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/edgeplane/conformance/$kube}
datastore=${CONFORMANCE_DATASTORE:-sqlite}
case "$datastore" in sqlite | etcd) ;; *)
	echo "CONFORMANCE_DATASTORE=$datastore: want sqlite or etcd" >&2
	exit 2
	;;
esac
[ "$(id -u)" = 0 ] || { echo "make conformance runs containerd and network namespaces: run it as root" >&2; exit 1; }

# What the build and the cluster need, installed when missing.
need_pkgs=()
need() { command -v "$1" >/dev/null 2>&1 || need_pkgs+=("$2"); }
need gcc gcc
need make make
need bzip2 bzip2
need dpkg-deb dpkg
need containerd containerd
need runc runc
need iptables iptables
need nft nftables
need nsenter util-linux
need flock util-linux
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -n "$(ls /usr/lib/*/libc.a 2>/dev/null)" ] || need_pkgs+=(libc6-dev)
[ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || need_pkgs+=(containernetworking-plugins)
[ -x /bin/busybox ] || need_pkgs+=(busybox-static)
# The images are made of the host's Debian packages: apt's lists must exist.
if [ "${#need_pkgs[@]}" -gt 0 ] || [ -z "$(ls /var/lib/apt/lists/*_Packages* 2>/dev/null)" ]; then
	apt-get update -qq
fi
if [ "${#need_pkgs[@]}" -gt 0 ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
fi

mkdir -p "$dir"
echo "conformance: building into $dir (parts already there are kept)"
go run ./test/conformance/cmd/conformance build -dir "$dir"
# The e2e test binary, built before the lock is taken.
go test -c -vet=off -o "$dir/edgeplane-e2e.test" ./test/e2e

# Each phase holds the lock on its own (a cluster of its own): other tests
# that need the lock get it between the phases.
run=$dir/runs/$datastore-$(date -u +%Y%m%dT%H%M%SZ)
phases=${CONFORMANCE_PHASES:-parallel,serial}
cd test/e2e # TestMain builds the edgeplane binary from ../../cmd/edgeplane
status=0
for phase in ${phases//,/ }; do
	echo "conformance: waiting for /tmp/edgeplane-e2e.lock, then running the $phase phase on $datastore"
	begin=$(date +%s)
	EDGEPLANE_CONFORMANCE_DIR=$dir EDGEPLANE_CONFORMANCE_DATASTORE=$datastore \
		EDGEPLANE_CONFORMANCE_FOCUS=${CONFORMANCE_FOCUS:-} EDGEPLANE_CONFORMANCE_PHASES=$phase \
		EDGEPLANE_CONFORMANCE_RUN=$run \
		flock /tmp/edgeplane-e2e.lock "$dir/edgeplane-e2e.test" -test.run '^TestConformance$' -test.v -test.timeout 6h || status=$?
	echo "conformance: $datastore $phase phase: $(( ($(date +%s) - begin) / 60 )) min, the wait for the lock included, exit $status"
done
cd ../..
go run ./test/conformance/cmd/conformance table "$run" | tee "$run/summary.md"
exit "$status"
