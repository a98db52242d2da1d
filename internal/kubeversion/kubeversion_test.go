package kubeversion

import (
	"os"
	"runtime/debug"
	"strings"
	"testing"

	clientversion "k8s.io/client-go/pkg/version"
	"k8s.io/component-base/version"
)

// goModVersion is the k8s.io/kubernetes version go.mod requires.
func goModVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == kubernetesModule && strings.HasPrefix(f[1], "v") {
			return f[1]
		}
	}
	t.Fatalf("go.mod requires no %s", kubernetesModule)
	return ""
}

// TestApply runs on the test binary, which is not stamped, with the build
// info an edgeplane binary carries (a test binary's lists no modules; the
// e2e tests run a binary built without ldflags): afterwards both version
// packages report go.mod's Kubernetes version. It is also the canary of the
// go:linkname workaround: it fails if upstream renames a variable (the
// linked name is then a variable of its own) or Get() stops reading them.
func TestApply(t *testing.T) {
	if v := version.Get().GitVersion; !strings.HasPrefix(v, unstamped) {
		t.Skipf("the test binary is stamped (%s)", v)
	}
	want := goModVersion(t)
	info := &debug.BuildInfo{Deps: []*debug.Module{{Path: kubernetesModule, Version: want}}}
	got, err := apply(info)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("Apply() = %s, want go.mod's %s", got, want)
	}
	parts := strings.SplitN(strings.TrimPrefix(want, "v"), ".", 3)
	for name, info := range map[string]struct{ GitVersion, Major, Minor string }{
		"component-base": {version.Get().GitVersion, version.Get().Major, version.Get().Minor},
		"client-go":      {clientversion.Get().GitVersion, clientversion.Get().Major, clientversion.Get().Minor},
	} {
		if info.GitVersion != want || info.Major != parts[0] || info.Minor != parts[1] {
			t.Errorf("%s reports %+v, want %s (%s.%s)", name, info, want, parts[0], parts[1])
		}
	}
	// A second call sees a stamped binary and changes nothing.
	if again, err := apply(nil); err != nil || again != want {
		t.Errorf("second Apply() = %s, %v", again, err)
	}
}

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deps    []*debug.Module
		want    string
		wantErr string
	}{
		{name: "required", deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.37.2"}, {Path: kubernetesModule, Version: "v1.37.2"}}, want: "1.37.2"},
		{name: "replaced", deps: []*debug.Module{{Path: kubernetesModule, Version: "v1.36.0", Replace: &debug.Module{Path: kubernetesModule, Version: "v1.37.1"}}}, want: "1.37.1"},
		{name: "replaced by a directory", deps: []*debug.Module{{Path: kubernetesModule, Version: "v1.37.2", Replace: &debug.Module{Path: "../kubernetes"}}}, want: "1.37.2"},
		{name: "pre-release", deps: []*debug.Module{{Path: kubernetesModule, Version: "v1.38.0-alpha.1"}}, want: "1.38.0-alpha.1"},
		{name: "component-base only", deps: []*debug.Module{{Path: componentBaseModule, Version: "v0.0.0", Replace: &debug.Module{Path: componentBaseModule, Version: "v0.37.2"}}}, want: "1.37.2"},
		{name: "kubernetes wins over component-base", deps: []*debug.Module{{Path: componentBaseModule, Version: "v0.36.0"}, {Path: kubernetesModule, Version: "v1.37.2"}}, want: "1.37.2"},
		{name: "missing", deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.37.2"}}, wantErr: "lists neither k8s.io/kubernetes"},
		{name: "component-base placeholder", deps: []*debug.Module{{Path: componentBaseModule, Version: "v0.0.0"}}, wantErr: "lists neither"},
		{name: "placeholder", deps: []*debug.Module{{Path: kubernetesModule, Version: "v0.0.0"}}, wantErr: "not a release"},
		{name: "devel", deps: []*debug.Module{{Path: kubernetesModule, Version: "(devel)"}}, wantErr: `has version "(devel)"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := fromBuildInfo(&debug.BuildInfo{Deps: tc.deps})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.String() != tc.want {
				t.Fatalf("version %s, want %s", v, tc.want)
			}
		})
	}
}
