#!/bin/sh
# Packs what a node needs besides edgeplane, for each architecture, into
# OUT/runtime-linux-<goarch>.tar.gz, which install.sh installs on a host
# without containerd:
#   bin/containerd, bin/containerd-shim-runc-v2, bin/ctr  Debian's containerd
#   bin/runc                                              Debian's runc
#   cni/bridge, cni/host-local, cni/loopback, cni/portmap Debian's containernetworking-plugins
#   bin/crictl        cri-tools at hack/runtime/go.mod's version, built here (static)
#   VERSIONS          each part's version, its source and the SHA-256 of its .deb
#   SHA256SUMS        of every file above
# Debian's packages are bookworm's, of the architecture (amd64, arm64,
# armhf for linux/arm); apt downloads them with a state of its own (the
# host's dpkg configuration is not touched) and verifies each .deb against
# the Packages index, whose hash the signed Release file holds (the host's
# sources and Debian archive keyring). Go modules are verified by go.sum.
#
# Usage: hack/dist-runtime.sh OUT GOARCH...
# Environment: DIST_RUNTIME_HOST=1 packs the host's installed packages
# instead (its architecture only; for tests, no download).
set -eu
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || {
	echo "usage: $0 OUT GOARCH..." >&2
	exit 2
}
out=$1
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
packages="containerd runc containernetworking-plugins"
plugins="bridge host-local loopback portmap"

debarch() {
	case $1 in
	amd64 | arm64) echo "$1" ;;
	arm) echo armhf ;;
	*)
		echo "dist-runtime: no Debian architecture for GOARCH=$1" >&2
		exit 1
		;;
	esac
}

apt_opts=""
if [ "${DIST_RUNTIME_HOST:-}" != 1 ]; then
	mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
	apt_opts="-q -o Dir::State::Lists=$work/apt/lists -o Dir::Cache=$work/apt/cache -o Dir::State::status=/dev/null"
	first=true
	for goarch in "$@"; do
		if $first; then
			apt_opts="$apt_opts -o APT::Architecture=$(debarch "$goarch")"
			first=false
		fi
		apt_opts="$apt_opts -o APT::Architectures::=$(debarch "$goarch")"
	done
	start=$(date +%s)
	# shellcheck disable=SC2086 # apt_opts is a list of options
	apt-get $apt_opts update >"$work/apt-update.log" 2>&1 || {
		cat "$work/apt-update.log" >&2
		exit 1
	}
	echo "apt index in $(($(date +%s) - start)) s"
fi

for goarch in "$@"; do
	start=$(date +%s)
	arch=$(debarch "$goarch")
	name=runtime-linux-$goarch
	stage=$work/$name
	root=$work/root-$arch
	mkdir -p "$stage/bin" "$stage/cni" "$root" "$work/deb-$arch"
	: >"$stage/VERSIONS"
	if [ "${DIST_RUNTIME_HOST:-}" = 1 ]; then
		[ "$arch" = "$(dpkg --print-architecture)" ] || {
			echo "dist-runtime: DIST_RUNTIME_HOST=1 packs the host's $(dpkg --print-architecture) packages, not $arch" >&2
			exit 1
		}
		root=""
		for p in $packages; do
			v=$(dpkg-query -W -f '${Version}' "$p:$arch") || {
				echo "dist-runtime: $p:$arch is not installed" >&2
				exit 1
			}
			echo "$p $v debian:$arch installed-on-build-host" >>"$stage/VERSIONS"
		done
	else
		wanted=""
		for p in $packages; do wanted="$wanted $p:$arch"; done
		# shellcheck disable=SC2086 # lists of options and package names
		(cd "$work/deb-$arch" && apt-get $apt_opts download $wanted) >"$work/download-$arch.log" 2>&1 || {
			cat "$work/download-$arch.log" >&2
			exit 1
		}
		for p in $packages; do
			deb=$(ls "$work/deb-$arch/${p}_"*"_$arch.deb")
			dpkg-deb -x "$deb" "$root"
			v=$(dpkg-deb -f "$deb" Version)
			echo "$p $v debian:$arch $(basename "$deb") sha256:$(sha256sum "$deb" | cut -d' ' -f1)" >>"$stage/VERSIONS"
		done
	fi
	for f in usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/bin/ctr usr/sbin/runc; do
		cp "$root/$f" "$stage/bin/"
	done
	for p in $plugins; do
		cp "$root/usr/lib/cni/$p" "$stage/cni/"
	done
	crictl=$(awk '$1 == "sigs.k8s.io/cri-tools" { print $2; exit }' hack/runtime/go.mod)
	CGO_ENABLED=0 GOOS=linux GOARCH=$goarch GOARM=7 go build -C hack/runtime -trimpath -ldflags '-s -w' \
		-o "$stage/bin/crictl" sigs.k8s.io/cri-tools/cmd/crictl
	echo "cri-tools $crictl go-module:sigs.k8s.io/cri-tools built-from-source (hack/runtime/go.sum)" >>"$stage/VERSIONS"
	chmod 755 "$stage"/bin/* "$stage"/cni/*
	(cd "$stage" && sha256sum bin/* cni/* >SHA256SUMS)
	tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -czf "$out/$name.tar.gz" "$name"
	echo "packed $out/$name.tar.gz ($(wc -c <"$out/$name.tar.gz") bytes) in $(($(date +%s) - start)) s:"
	sed 's/^/  /' "$stage/VERSIONS"
done
