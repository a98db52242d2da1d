// Package kubeversion makes a binary built without hack/ldflags.sh (`go build`,
// `go run ./cmd/edgeplane`, `go install`) report the Kubernetes version it
// was built from, as a stamped release does.
//
// Unstamped, k8s.io/component-base/version reports "v0.0.0-master+$Format:%H$",
// which kubectl and discovery clients cannot parse. The version is in the
// binary anyway: the build info lists the k8s.io/kubernetes module that go.mod
// requires. Apply copies it into the variables the -X ldflags would set.
package kubeversion

import (
	"fmt"
	"runtime/debug"
	"strings"
	_ "unsafe" // for go:linkname

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/version"
	// Imported so that its variables below are linked in.
	_ "k8s.io/client-go/pkg/version"
)

// The variables hack/ldflags.sh stamps with -X. They are unexported, and -X
// is the only other way to set them. If upstream renames one, the name here
// is a variable of its own and the version stays unstamped: TestApply fails
// then (workaround listed in docs/RELIABILITY.md; TestApply is its canary).
var (
	//go:linkname baseGitVersion k8s.io/component-base/version.gitVersion
	baseGitVersion string
	//go:linkname baseGitMajor k8s.io/component-base/version.gitMajor
	baseGitMajor string
	//go:linkname baseGitMinor k8s.io/component-base/version.gitMinor
	baseGitMinor string
	//go:linkname clientGitVersion k8s.io/client-go/pkg/version.gitVersion
	clientGitVersion string
	//go:linkname clientGitMajor k8s.io/client-go/pkg/version.gitMajor
	clientGitMajor string
	//go:linkname clientGitMinor k8s.io/client-go/pkg/version.gitMinor
	clientGitMinor string
)

// kubernetesModule is the module whose version the binary's Kubernetes is.
const kubernetesModule = "k8s.io/kubernetes"

// componentBaseModule holds the version packages; its v0.N.P is Kubernetes v1.N.P.
const componentBaseModule = "k8s.io/component-base"

// unstamped is the prefix of upstream's placeholder version.
const unstamped = "v0.0.0-master"

// initErr is what Apply returned at init.
var initErr error

// Apply runs at init, ahead of every k8s.io package that reads the version
// when it is initialized (component-base/metrics/prometheus/version labels
// kubernetes_build_info then): Go initializes a package as soon as its
// dependencies are, taking the first by import path, and this package depends
// on the version packages only.
func init() { _, initErr = Apply() }

// Err reports why the version could not be set at init (nil if it was, or
// if the binary is stamped).
func Err() error { return initErr }

// Apply sets the Kubernetes version from the build info when the binary was
// not stamped, and returns the version in effect. A stamped binary is left
// as it is.
func Apply() (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return apply(info)
}

// apply is Apply with the build info given (nil: there is none).
func apply(info *debug.BuildInfo) (string, error) {
	if !strings.HasPrefix(version.Get().GitVersion, unstamped) {
		return version.Get().GitVersion, nil
	}
	if info == nil {
		return version.Get().GitVersion, fmt.Errorf("kubernetes version: the binary carries no build info; build it with hack/ldflags.sh")
	}
	v, err := fromBuildInfo(info)
	if err != nil {
		return version.Get().GitVersion, err
	}
	if err := set(v); err != nil {
		return version.Get().GitVersion, err
	}
	return version.Get().GitVersion, nil
}

// fromBuildInfo finds the k8s.io/kubernetes module among the dependencies
// (its replacement's version if it is replaced). A binary without it (a test
// binary, say) still has k8s.io/component-base, which Kubernetes releases as
// v0.N.P alongside v1.N.P.
func fromBuildInfo(info *debug.BuildInfo) (*utilversion.Version, error) {
	var base *utilversion.Version
	for _, dep := range info.Deps {
		if dep.Path != kubernetesModule && dep.Path != componentBaseModule {
			continue
		}
		mod := dep
		if dep.Replace != nil && dep.Replace.Version != "" {
			mod = dep.Replace
		}
		v, err := utilversion.ParseSemantic(mod.Version)
		if err != nil {
			return nil, fmt.Errorf("kubernetes version: module %s has version %q: %w", dep.Path, mod.Version, err)
		}
		if dep.Path == componentBaseModule {
			base = v
			continue
		}
		if v.Major() == 0 {
			return nil, fmt.Errorf("kubernetes version: module %s has version %q, not a release; build with hack/ldflags.sh", kubernetesModule, mod.Version)
		}
		return v, nil
	}
	if base != nil && base.Major() == 0 && base.Minor() > 0 {
		return utilversion.ParseSemantic("v1" + strings.TrimPrefix(base.String(), "0"))
	}
	return nil, fmt.Errorf("kubernetes version: the build info lists neither %s nor a released %s; build with hack/ldflags.sh", kubernetesModule, componentBaseModule)
}

// set writes v where -X would have.
func set(v *utilversion.Version) error {
	s := "v" + v.String()
	major, minor := fmt.Sprint(v.Major()), fmt.Sprint(v.Minor())
	baseGitVersion, baseGitMajor, baseGitMinor = s, major, minor
	clientGitVersion, clientGitMajor, clientGitMinor = s, major, minor
	// Get() reads the version through the dynamic copy made at init; it
	// accepts the new value now that it equals the static one.
	if err := version.SetDynamicVersion(s); err != nil {
		return fmt.Errorf("kubernetes version: %s not taken: %w", s, err)
	}
	return nil
}
