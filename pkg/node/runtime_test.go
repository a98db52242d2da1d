package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
)

// TestManagedCgroupDriver: --kubelet-arg=cgroup-driver decides, a bad
// value is refused naming the flag; without it the host decides.
func TestManagedCgroupDriver(t *testing.T) {
	host := "cgroupfs"
	if mode, err := criruntime.HostCgroups(""); err == nil && mode.V2() && systemdRuns() {
		host = "systemd"
	}
	tests := []struct {
		args    []string
		want    string
		wantErr string
	}{
		{args: nil, want: host},
		{args: []string{"max-pods=50"}, want: host},
		{args: []string{"cgroup-driver=systemd"}, want: "systemd"},
		{args: []string{"cgroup-driver=cgroupfs"}, want: "cgroupfs"},
		{args: []string{"cgroup-driver=cgroup"}, wantErr: "--kubelet-arg=cgroup-driver=cgroup: want systemd or cgroupfs"},
	}
	for _, tt := range tests {
		got, err := ManagedCgroupDriver(tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ManagedCgroupDriver(%q) = %q, %v; want an error with %q", tt.args, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ManagedCgroupDriver(%q) = %q, %v; want %q", tt.args, got, err, tt.want)
		}
	}
}

// TestChooseRuntime: the endpoint flag wins over a containerd binary.
func TestChooseRuntime(t *testing.T) {
	ctx := context.Background()
	c := ChooseRuntime(ctx, "unix:///run/x.sock")
	if c.Managed != nil || c.Endpoint != "unix:///run/x.sock" || !strings.Contains(c.Why, "--container-runtime-endpoint") {
		t.Errorf("with an endpoint: %+v, want the host's runtime at it", c)
	}
	bin := t.TempDir()
	script := "#!/bin/sh\necho containerd github.com/containerd/containerd 1.7.2 abc\n"
	if err := os.WriteFile(filepath.Join(bin, "containerd"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	c = ChooseRuntime(ctx, "")
	if c.Managed == nil || c.Managed.Version != "1.7.2" || !strings.Contains(c.Why, "on the PATH") {
		t.Errorf("containerd 1.7.2 on the PATH: %+v, want it run by edgeplane", c)
	}
	t.Setenv("PATH", t.TempDir())
	c = ChooseRuntime(ctx, "")
	if c.Managed != nil || !strings.Contains(c.Why, "no containerd binary found") {
		t.Errorf("no binary on the PATH: %+v, want the host's runtime, saying why", c)
	}
}

// noCredentials are credentials New takes and never uses.
type noCredentials struct{}

func (noCredentials) Ensure(context.Context, string, Paths) (Cluster, error) {
	return Cluster{}, nil
}

// TestNewManaged: a node whose runtime is a managed containerd (no
// Runtime until the containerd answers) is accepted by New, its kubelet
// pointed at the managed socket with the containerd's cgroup driver.
func TestNewManaged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DirName)
	ctd, err := containerd.New(context.Background(), containerd.Config{
		Dir: PathsIn(dir).Containerd, Binary: &containerd.Binary{Path: "/usr/bin/containerd", Version: "1.6.20~ds1"},
		CgroupDriver: "cgroupfs", SandboxImage: defaultPauseImage, CNIBinDir: "/opt/cni/bin", CNIConfDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Settings: Settings{Name: "edge-1"}, Dir: dir, Managed: ctd, Credentials: noCredentials{}}
	if _, err := New(cfg); err != nil {
		t.Fatalf("New with a managed containerd: %v", err)
	}
	o := cfg.KubeletOptions(PathsIn(dir), Cluster{})
	if o.RuntimeEndpoint != "unix://"+PathsIn(dir).ContainerdSocket || o.CgroupDriver != "cgroupfs" {
		t.Errorf("kubelet runtime endpoint %q, cgroup driver %q; want unix://%s, cgroupfs", o.RuntimeEndpoint, o.CgroupDriver, PathsIn(dir).ContainerdSocket)
	}
}
