package preflight

import (
	"fmt"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
)

func TestEvaluateRuntime(t *testing.T) {
	containerd16 := &criruntime.Runtime{
		Endpoint: "unix:///run/containerd/containerd.sock", Name: "containerd", Version: "1.6.20~ds1", APIVersion: "v1",
		CgroupDriver: criruntime.CgroupDriverUnknown, Supported: true,
		Conditions: []criruntime.Condition{{Type: "RuntimeReady", Status: true}, {Type: "NetworkReady", Status: false, Reason: "NetworkPluginNotReady"}},
		Warnings:   []string{"containerd 1.6.20~ds1 is older than 1.7: upgrade when you can"},
	}
	containerd2 := &criruntime.Runtime{
		Endpoint: "unix:///run/containerd/containerd.sock", Name: "containerd", Version: "2.1.4", APIVersion: "v1",
		CgroupDriver: "systemd", Supported: true,
		Conditions: []criruntime.Condition{{Type: "RuntimeReady", Status: true}, {Type: "NetworkReady", Status: true}},
	}
	noRuntime := fmt.Errorf("%w: no socket at /run/containerd/containerd.sock: install one (apt-get install containerd)", criruntime.ErrNoRuntime)
	dead := fmt.Errorf("%w: the socket /run/containerd/containerd.sock exists but connection refused", criruntime.ErrRuntimeDead)

	tests := []struct {
		name  string
		facts RuntimeFacts
		// want is every finding, "severity check: substring".
		want []string
	}{
		{
			name:  "containerd 1.6 on hybrid cgroups",
			facts: RuntimeFacts{Runtime: containerd16, Cgroups: criruntime.CgroupHybrid},
			want: []string{
				"ok runtime: containerd 1.6.20~ds1 at unix:///run/containerd/containerd.sock, CRI API v1, RuntimeReady=true NetworkReady=false (NetworkPluginNotReady)",
				"warn runtime: older than 1.7",
				"ok cgroup-driver: unknown (runtime too old to say",
				"warn kubelet-cgroups: cgroup v1 (hybrid): supported with failCgroupV1: false",
			},
		},
		{
			name:  "containerd 2 on cgroup v2",
			facts: RuntimeFacts{Runtime: containerd2, Cgroups: criruntime.CgroupV2},
			want: []string{
				"ok runtime: containerd 2.1.4",
				"ok cgroup-driver: systemd",
				"ok kubelet-cgroups: cgroup v2 (unified): supported",
			},
		},
		{
			name:  "no runtime, searched",
			facts: RuntimeFacts{Err: noRuntime, Cgroups: criruntime.CgroupV2},
			want: []string{
				"warn runtime: no container runtime found: no socket at /run/containerd/containerd.sock: install one (apt-get install containerd); this server will run as a control plane only",
				"ok kubelet-cgroups: cgroup v2",
			},
		},
		{
			name:  "dead runtime, given",
			facts: RuntimeFacts{Endpoint: "unix:///run/containerd/containerd.sock", Err: dead, Cgroups: criruntime.CgroupV2},
			want: []string{
				"BLOCKER runtime: the container runtime does not answer: the socket /run/containerd/containerd.sock exists but connection refused; the server will not start with --container-runtime-endpoint unix:///run/containerd/containerd.sock",
				"ok kubelet-cgroups",
			},
		},
		{
			name:  "cgroups unknown",
			facts: RuntimeFacts{Runtime: containerd2, CgroupsErr: fmt.Errorf("cgroup version unknown: statfs /sys/fs/cgroup: no such file or directory")},
			want: []string{
				"ok runtime", "ok cgroup-driver",
				"warn kubelet-cgroups: cgroup version unknown: statfs /sys/fs/cgroup: no such file or directory: the kubelet may not start",
			},
		},
		{
			name: "containerd run by edgeplane",
			facts: RuntimeFacts{Cgroups: criruntime.CgroupV2, Managed: ManagedRuntime{
				Binary: &containerd.Binary{Path: "/usr/bin/containerd", Version: "1.6.20~ds1"}, Why: "no --container-runtime-endpoint, and containerd 1.6.20~ds1 is on the PATH",
				Dir: "/var/lib/edgeplane/agent/containerd", CgroupDriver: "systemd"}},
			want: []string{
				"ok runtime: containerd 1.6.20~ds1 (/usr/bin/containerd), run by edgeplane under /var/lib/edgeplane/agent/containerd: no --container-runtime-endpoint, and containerd 1.6.20~ds1 is on the PATH",
				"ok cgroup-driver: systemd (the kubelet's and the managed containerd's)",
				"ok kubelet-cgroups: cgroup v2",
			},
		},
		{
			name: "containerd run by edgeplane, data dir too long for its socket",
			facts: RuntimeFacts{Cgroups: criruntime.CgroupV2, Managed: ManagedRuntime{
				Binary: &containerd.Binary{Path: "/usr/bin/containerd", Version: "1.7.2"}, Dir: "/" + strings.Repeat("d", 100) + "/agent/containerd",
				CgroupDriverErr: fmt.Errorf("--kubelet-arg=cgroup-driver=cgroup: want systemd or cgroupfs")}},
			want: []string{
				"ok runtime: containerd 1.7.2",
				"BLOCKER runtime: use a shorter --data-dir",
				"BLOCKER cgroup-driver: --kubelet-arg=cgroup-driver=cgroup",
				"ok kubelet-cgroups",
			},
		},
		{
			name:  "no runtime, no containerd binary",
			facts: RuntimeFacts{Err: noRuntime, Cgroups: criruntime.CgroupV2, Managed: ManagedRuntime{Why: "edgeplane runs no containerd of its own (no containerd binary found)"}},
			want: []string{
				"warn runtime: no container runtime found",
				"ok runtime: edgeplane runs no containerd of its own (no containerd binary found)",
				"ok kubelet-cgroups",
			},
		},
		{
			name:  "kubelet disabled",
			facts: RuntimeFacts{Disabled: true},
			want:  []string{"ok runtime: not checked: the kubelet is disabled"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := EvaluateRuntime(tc.facts)
			if len(got) != len(tc.want) {
				t.Fatalf("findings %q, want %d: %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				prefix, substr, _ := strings.Cut(w, ": ")
				sev, check, _ := strings.Cut(prefix, " ")
				f := got[i]
				if f.Severity.String() != sev || f.Check != check || !strings.Contains(f.Message, substr) {
					t.Errorf("finding %d is %q, want %s %s saying %q", i, f, sev, check, substr)
				}
			}
		})
	}
}
