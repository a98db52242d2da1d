#!/usr/bin/env bash
# Prints the -ldflags that stamp edgeplane's version and the Kubernetes version
# into the binary; unstamped, /version reports v0.0.0-master+$Format:%H$ and
# kubectl cannot parse it. The Kubernetes version is read from go.mod.
# Usage: hack/ldflags.sh [edgeplane-version]
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-dev}
kube=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' go.mod)
major=${kube#v}; major=${major%%.*}
minor=${kube#v*.}; minor=${minor%%.*}
flags="-s -w -X github.com/edgeplane/edgeplane/cmd/edgeplane/app.Version=${version}"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	flags+=" -X ${pkg}.gitVersion=${kube} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
done
echo "$flags"
