#!/bin/sh
# Builds the release folder: static (CGO_ENABLED=0), stripped, stamped
# edgeplane binaries for each platform, the install and uninstall scripts,
# xz-compressed copies of the binaries (what a release publishes: about a
# fifth of the size; install.sh unpacks them), each platform's container
# runtime for a node, runtime-linux-<arch>.tar.gz (hack/dist-runtime.sh:
# Debian's containerd, runc and CNI plugins, and crictl built from source),
# and SHA256SUMS over all of them.
# Usage: hack/dist.sh [version]
# Environment: DIST_DIR (default dist), DIST_PLATFORMS (default
# "linux/amd64 linux/arm64 linux/arm"; linux/arm is ARMv7, GOARM=7),
# DIST_RUNTIME=0 leaves the runtime tarballs out (no download).
set -eu
cd "$(dirname "$0")/.."
version=${1:-dev}
out=${DIST_DIR:-dist}
platforms=${DIST_PLATFORMS:-linux/amd64 linux/arm64 linux/arm}
ldflags=$(./hack/ldflags.sh "$version")

mkdir -p "$out"
files=""
for platform in $platforms; do
	goos=${platform%/*}
	goarch=${platform#*/}
	name=edgeplane-$goos-$goarch
	start=$(date +%s)
	CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch GOARM=7 \
		go build -trimpath -ldflags "$ldflags" -o "$out/$name" ./cmd/edgeplane
	echo "built $out/$name ($(wc -c <"$out/$name") bytes) in $(($(date +%s) - start)) s"
	xz -9 -T0 -f -k "$out/$name"
	echo "compressed $out/$name.xz ($(wc -c <"$out/$name.xz") bytes)"
	files="$files $name $name.xz"
done
if [ "${DIST_RUNTIME:-1}" != 0 ]; then
	goarches=""
	for platform in $platforms; do goarches="$goarches ${platform#*/}"; done
	start=$(date +%s)
	# shellcheck disable=SC2086 # a list of architectures
	./hack/dist-runtime.sh "$out" $goarches
	echo "packed the runtime in $(($(date +%s) - start)) s"
	for a in $goarches; do files="$files runtime-linux-$a.tar.gz"; done
fi
cp scripts/install.sh scripts/edgeplane-uninstall.sh "$out/"
# shellcheck disable=SC2086 # files is a list of plain names
(cd "$out" && sha256sum $files install.sh edgeplane-uninstall.sh >SHA256SUMS)
echo "wrote $out/SHA256SUMS"
