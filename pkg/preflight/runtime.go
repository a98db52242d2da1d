package preflight

import (
	"context"
	"fmt"
	"strings"

	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
)

// ManagedRuntime is the containerd edgeplane would run for the node
// (node.ChooseRuntime).
type ManagedRuntime struct {
	// Binary is that containerd; nil: the node uses a runtime of the
	// host's.
	Binary *containerd.Binary
	// Why says why the node uses the runtime it does.
	Why string
	// Dir is its directory, <data-dir>/agent/containerd.
	Dir string
	// CgroupDriver is the driver it would be configured with, or the
	// error choosing one.
	CgroupDriver    string
	CgroupDriverErr error
}

// RuntimeFacts are what the node part of a server would find: its
// container runtime and the host's cgroup mode.
type RuntimeFacts struct {
	// Disabled: the server runs no node (--disable kubelet); nothing else
	// is set then.
	Disabled bool
	// Endpoint is --container-runtime-endpoint ("": searched).
	Endpoint string
	// Managed is the node's own containerd, when edgeplane would run one;
	// Runtime and Err are then unset.
	Managed ManagedRuntime
	Runtime *criruntime.Runtime
	Err     error

	Cgroups    criruntime.CgroupMode
	CgroupsErr error
}

// GatherRuntime looks for the container runtime at endpoint ("" searches
// the usual sockets) unless edgeplane would run the node's own containerd
// (managed.Binary), and reads the host's cgroup mode.
func GatherRuntime(ctx context.Context, endpoint string, disabled bool, managed ManagedRuntime) RuntimeFacts {
	if disabled {
		return RuntimeFacts{Disabled: true}
	}
	f := RuntimeFacts{Endpoint: endpoint, Managed: managed}
	if managed.Binary == nil {
		f.Runtime, f.Err = criruntime.Detect(ctx, endpoint)
	}
	f.Cgroups, f.CgroupsErr = criruntime.HostCgroups("")
	return f
}

// EvaluateRuntime turns the runtime facts into findings: the runtime, its
// warnings, its cgroup driver, and whether the kubelet runs on the host's
// cgroups. With no --container-runtime-endpoint a missing or broken
// runtime only makes the server a control plane without a node (a
// warning); with one, the server would fail to start (a blocker).
func EvaluateRuntime(f RuntimeFacts) []Finding {
	var out []Finding
	add := func(s Severity, check, format string, args ...any) {
		out = append(out, Finding{Severity: s, Check: check, Message: fmt.Sprintf(format, args...)})
	}
	if f.Disabled {
		add(OK, "runtime", "not checked: the kubelet is disabled (--disable kubelet), this server is a control plane only")
		return out
	}

	failed := Warning
	consequence := "this server will run as a control plane only, without a node"
	if f.Endpoint != "" {
		failed = Blocker
		consequence = "the server will not start with --container-runtime-endpoint " + f.Endpoint
	}
	rt := f.Runtime
	switch m := f.Managed; {
	case m.Binary != nil:
		add(OK, "runtime", "containerd %s (%s), run by edgeplane under %s: %s", m.Binary.Version, m.Binary.Path, m.Dir, m.Why)
		if err := containerd.CheckDir(m.Dir); err != nil {
			add(Blocker, "runtime", "%v", err)
		}
		if m.CgroupDriverErr != nil {
			add(Blocker, "cgroup-driver", "%v", m.CgroupDriverErr)
		} else {
			add(OK, "cgroup-driver", "%s (the kubelet's and the managed containerd's)", m.CgroupDriver)
		}
	case f.Err != nil:
		add(failed, "runtime", "%v; %s", f.Err, consequence)
		if f.Managed.Why != "" {
			add(OK, "runtime", "%s", f.Managed.Why)
		}
	default:
		conds := make([]string, len(rt.Conditions))
		for i, c := range rt.Conditions {
			conds[i] = c.String()
		}
		why := ""
		if f.Managed.Why != "" {
			why = "; " + f.Managed.Why
		}
		add(OK, "runtime", "%s %s at %s, CRI API %s, %s%s", rt.Name, rt.Version, rt.Endpoint, orDefault(rt.APIVersion, "unknown"),
			orDefault(strings.Join(conds, " "), "no status conditions"), why)
		for _, w := range rt.Warnings {
			add(Warning, "runtime", "%s", w)
		}
		add(OK, "cgroup-driver", "%s", rt.CgroupDriver)
	}

	switch {
	case f.CgroupsErr != nil:
		add(Warning, "kubelet-cgroups", "%v: the kubelet may not start", f.CgroupsErr)
	case f.Cgroups.V2():
		add(OK, "kubelet-cgroups", "cgroup %s: %s", f.Cgroups, f.Cgroups.KubeletSupport())
	default:
		add(Warning, "kubelet-cgroups", "cgroup %s: %s", f.Cgroups, f.Cgroups.KubeletSupport())
	}
	return out
}
