package criruntime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
)

// TestDetectContainerd asks a real containerd (a private one) about itself.
func TestDetectContainerd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctrd := testcontainerd.Start(t, testcontainerd.Options{})

	rt, err := Detect(ctx, ctrd.Endpoint)
	if err != nil {
		t.Fatalf("Detect(%s): %v", ctrd.Endpoint, err)
	}
	t.Logf("%+v", rt)
	if rt.Endpoint != ctrd.Endpoint || rt.Name != "containerd" || rt.APIVersion != "v1" || !rt.Supported {
		t.Errorf("got %s %s API %s at %s (supported %t), want containerd API v1 at %s, supported",
			rt.Name, rt.Version, rt.APIVersion, rt.Endpoint, rt.Supported, ctrd.Endpoint)
	}
	if c, ok := rt.Condition(runtimeapi.RuntimeReady); !ok || !c.Status {
		t.Errorf("RuntimeReady %+v (found %t), want true", c, ok)
	}
	if _, ok := rt.Condition(runtimeapi.NetworkReady); !ok {
		t.Errorf("no NetworkReady condition in %v", rt.Conditions)
	}
	v, err := version.ParseGeneric(rt.Version)
	if err != nil {
		t.Fatalf("containerd version %q: %v", rt.Version, err)
	}
	old := v.LessThan(version.MajorMinor(1, 7))
	warned := false
	for _, w := range rt.Warnings {
		warned = warned || strings.Contains(w, "older than 1.7")
	}
	if warned != old {
		t.Errorf("containerd %s: warned about its age %t, want %t (warnings %q)", rt.Version, warned, old, rt.Warnings)
	}
	if rt.SandboxImage != ctrd.PauseImage {
		t.Errorf("SandboxImage %q, want %q (the sandbox_image of its config)", rt.SandboxImage, ctrd.PauseImage)
	}
	// containerd 1.6 has no RuntimeConfig; 1.7 and later name the driver.
	switch {
	case old && rt.CgroupDriver != CgroupDriverUnknown:
		t.Errorf("containerd %s: cgroup driver %q, want %q", rt.Version, rt.CgroupDriver, CgroupDriverUnknown)
	case !old && rt.CgroupDriver != "systemd" && rt.CgroupDriver != "cgroupfs":
		t.Errorf("containerd %s: cgroup driver %q, want systemd or cgroupfs", rt.Version, rt.CgroupDriver)
	}
}

// TestHostCgroups compares HostCgroups with the mount table.
func TestHostCgroups(t *testing.T) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	fsType := map[string]string{} // mount point -> type, the last mount wins
	for _, line := range strings.Split(string(mounts), "\n") {
		// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw"
		pre, post, ok := strings.Cut(line, " - ")
		fields, types := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(types) < 1 {
			continue
		}
		fsType[fields[4]] = types[0]
	}
	want := map[string]CgroupMode{"cgroup2": CgroupV2}[fsType["/sys/fs/cgroup"]]
	if fsType["/sys/fs/cgroup"] == "tmpfs" {
		want = CgroupV1
		if fsType["/sys/fs/cgroup/unified"] == "cgroup2" {
			want = CgroupHybrid
		}
	}

	tests := []struct {
		name    string
		root    string
		want    CgroupMode
		wantErr string
	}{
		{name: "this host", root: "", want: want},
		{name: "not a cgroup mount", root: "/proc", wantErr: "neither a cgroup2 nor a tmpfs"},
		{name: "missing", root: filepath.Join(t.TempDir(), "nope"), wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HostCgroups(tc.root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("HostCgroups(%s) = %q, %v; want an error saying %q", tc.root, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("HostCgroups = %q, want %q from the mount table", got, tc.want)
			}
			t.Logf("%s: V2 %t, kubelet: %s", got, got.V2(), got.KubeletSupport())
		})
	}
}
