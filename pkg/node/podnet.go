package node

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/cni"
)

// recheckInterval is how often the pod network writer checks that its
// configuration file is still there and unchanged.
const recheckInterval = 5 * time.Minute

// PodNetwork writes the node's CNI configuration once the Node has pod
// CIDRs, and keeps it written. It works in the background: the node must
// register (the kubelet does that) before the node IPAM controller gives it
// a range; the container runtime reports the network not ready, and the
// kubelet holds pods back, until the file is there. Ready waits for the
// first write; a writer that cannot go on ends the component (Done, Err).
type PodNetwork struct {
	// Node is the Node's name.
	Node string
	// Kubeconfig holds the node's credentials.
	Kubeconfig string
	// ConfDir is the runtime's CNI configuration directory.
	ConfDir string
	// Bridge is the bridge's name (empty: cni.DefaultBridge).
	Bridge string
	// MTU, when set, is the pod network across nodes (flannel): it blocks
	// until that network has chosen the pods' MTU, and that network
	// masquerades what leaves the cluster, not the bridge.
	MTU func(context.Context) (int, error)
	// IPAMDataDir is the node's own host-local state directory
	// (Paths.IPAM). Reservations a node of an earlier version made in
	// cni.LegacyIPAMDataDir for the node's pod CIDRs move there before the
	// configuration names it (see adopt).
	IPAMDataDir string
	// legacyIPAM is cni.LegacyIPAMDataDir unless a test sets it.
	legacyIPAM string

	loop background.Loop
	component.Status
}

// Name implements the bootstrap component contract.
func (p *PodNetwork) Name() string { return "pod-network" }

// Start checks that the CNI plugins are installed and starts the writer.
func (p *PodNetwork) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("pod-network")
	if dir, err := cni.FindPluginDir(); err != nil {
		// The runtime names its own plugin directory; ours is only a
		// check, so a missing plugin is a warning with the fix.
		logger.Error(err, "Pods will not get a network")
	} else {
		logger.V(1).Info("Found the CNI plugins", "dir", dir)
	}
	p.loop.Start(klog.NewContext(ctx, logger), func(runCtx context.Context) { p.run(runCtx) })
	return nil
}

// Ready waits for the first write of the configuration.
func (p *PodNetwork) Ready(ctx context.Context) error { return p.WaitReady(ctx) }

// Stop ends the writer.
func (p *PodNetwork) Stop(ctx context.Context) error {
	return p.loop.Stop(ctx)
}

func (p *PodNetwork) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	fail := func(err error) {
		if ctx.Err() == nil {
			p.End(fmt.Errorf("pods will not get a network: %w", err))
		}
	}
	client, err := kubeclient.New(p.Kubeconfig, p.Name(), kubeclient.Steady)
	if err != nil {
		fail(err)
		return
	}
	cidrs, err := cni.WaitForPodCIDRs(ctx, client, p.Node)
	if err != nil {
		fail(err)
		return
	}
	conf := p.config(cidrs)
	if p.MTU != nil {
		mtu, err := p.MTU(ctx)
		if err != nil {
			fail(err)
			return
		}
		conf.MTU, conf.NoMasquerade = mtu, true
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		p.adopt(ctx, cidrs)
		changed, err := cni.Write(p.ConfDir, conf)
		switch {
		case err != nil:
			// The directory is the runtime's: a write that fails may
			// pass (a full disk), and the file written before stays.
			logger.Error(err, "Writing the pod network configuration")
			return
		case changed:
			logger.Info("Wrote the pod network configuration", "file", p.ConfDir+"/"+cni.ConfFileName, "podCIDRs", cidrs)
			p.MarkReady()
			// The runtime reloads the file on its change; a pod network
			// set up with the previous file meanwhile reserved its address
			// in the previous directory.
			select {
			case <-ctx.Done():
				return
			case <-time.After(adoptAgain):
			}
			p.adopt(ctx, cidrs)
		}
		p.MarkReady()
	}, recheckInterval)
}

// adoptAgain is how long after a write of the configuration the writer
// looks again for reservations made with the previous one.
const adoptAgain = 10 * time.Second

// config is the node's CNI configuration for its pod CIDRs.
func (p *PodNetwork) config(cidrs []string) cni.Config {
	return cni.Config{PodCIDRs: cidrs, Bridge: p.Bridge, IPAMDataDir: p.IPAMDataDir}
}

// adopt moves the reservations of the node's pod addresses from host-local's
// default directory, where a node of an earlier version kept them, into
// the node's own (cni.AdoptAllocations): on every check, so that one made
// by a pod network set up while the runtime still had the previous
// configuration moves too. Moved, not copied: a reservation left behind
// would be released nowhere (the runtime releases with the present
// configuration) and would hold its address there for good.
func (p *PodNetwork) adopt(ctx context.Context, cidrs []string) {
	if p.IPAMDataDir == "" {
		return
	}
	legacy := p.legacyIPAM
	if legacy == "" {
		legacy = cni.LegacyIPAMDataDir
	}
	logger := klog.FromContext(ctx)
	moved, conflicts, err := cni.AdoptAllocations(legacy, p.IPAMDataDir, cni.NetworkName, cidrs)
	if len(moved) > 0 {
		logger.Info("Moved pod address reservations into the node's IPAM directory", "from", legacy, "to", p.IPAMDataDir, "addresses", moved)
	}
	if len(conflicts) > 0 {
		logger.Error(nil, "Pod addresses reserved in both IPAM directories: two pods may hold each; delete the pods with these addresses", "from", legacy, "to", p.IPAMDataDir, "addresses", conflicts)
	}
	if err != nil {
		logger.Error(err, "Moving pod address reservations into the node's IPAM directory")
	}
}
