#!/bin/sh
# Builds the release folder: static (CGO_ENABLED=0), stripped, stamped
# edgeplane binaries for each platform, the install and uninstall scripts,
# xz-compressed copies of the binaries (what a release publishes: about a
# fifth of the size; install.sh unpacks them), and SHA256SUMS over all of them.
# Usage: hack/dist.sh [version]
# Environment: DIST_DIR (default dist), DIST_PLATFORMS (default
# "linux/amd64 linux/arm64 linux/arm"; linux/arm is ARMv7, GOARM=7).
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
cp scripts/install.sh scripts/edgeplane-uninstall.sh "$out/"
# shellcheck disable=SC2086 # files is a list of plain names
(cd "$out" && sha256sum $files install.sh edgeplane-uninstall.sh >SHA256SUMS)
echo "wrote $out/SHA256SUMS"
