#!/usr/bin/env bash
# Prints the -ldflags that stamp edgeplane's version and commit and the Kubernetes version
# into the binary. The Kubernetes version is read from go.mod; an unstamped build reads the
# same from its build info at start (internal/kubeversion), so stamping it is belt and braces.
# Usage: hack/ldflags.sh [edgeplane-version]
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-dev}
kube=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' go.mod)
major=${kube#v}; major=${major%%.*}
minor=${kube#v*.}; minor=${minor%%.*}
# The commit: $EDGEPLANE_COMMIT, else git's (with -dirty for uncommitted changes).
commit=${EDGEPLANE_COMMIT:-}
if [ -z "$commit" ]; then
	commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
	if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then
		commit+=-dirty
	fi
fi
app=github.com/edgeplane/edgeplane/cmd/edgeplane/app
flags="-s -w -X ${app}.Version=${version} -X ${app}.Commit=${commit}"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	flags+=" -X ${pkg}.gitVersion=${kube} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
done
echo "$flags"
