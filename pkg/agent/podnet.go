package agent

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/pkg/cni"
)

// recheckInterval is how often the pod network writer checks that its
// configuration file is still there and unchanged.
const recheckInterval = 5 * time.Minute

// PodNetwork writes the node's CNI configuration once the Node has pod
// CIDRs, and keeps it written. It works in the background: the node must
// register (the kubelet does that) before the node IPAM controller gives it
// a range, so nothing waits for it at start-up; the container runtime
// reports the network not ready, and the kubelet holds pods back, until the
// file is there.
type PodNetwork struct {
	// Node is the Node's name.
	Node string
	// Kubeconfig holds the node's credentials (written by the kubelet's TLS
	// bootstrap on an agent, so it may appear only after start).
	Kubeconfig string
	// ConfDir is the runtime's CNI configuration directory.
	ConfDir string
	// Bridge is the bridge's name (empty: cni.DefaultBridge).
	Bridge string
	// MTU, when set, is the pod network across nodes (flannel): it blocks
	// until that network has chosen the pods' MTU, and that network
	// masquerades what leaves the cluster, not the bridge.
	MTU func(context.Context) (int, error)

	loop background.Loop
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

// Ready is immediate: see the type's comment.
func (p *PodNetwork) Ready(context.Context) error { return nil }

// Stop ends the writer.
func (p *PodNetwork) Stop(ctx context.Context) error {
	return p.loop.Stop(ctx)
}

func (p *PodNetwork) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	client, err := p.waitForClient(ctx)
	if err != nil {
		return // ctx ended
	}
	cidrs, err := cni.WaitForPodCIDRs(ctx, client, p.Node)
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "Pods will not get a network")
		}
		return
	}
	conf := cni.Config{PodCIDRs: cidrs, Bridge: p.Bridge}
	if p.MTU != nil {
		mtu, err := p.MTU(ctx)
		if err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Pods will not get a network")
			}
			return
		}
		conf.MTU, conf.NoMasquerade = mtu, true
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		changed, err := cni.Write(p.ConfDir, conf)
		switch {
		case err != nil:
			logger.Error(err, "Writing the pod network configuration")
		case changed:
			logger.Info("Wrote the pod network configuration", "file", p.ConfDir+"/"+cni.ConfFileName, "podCIDRs", cidrs)
		}
	}, recheckInterval)
}

// waitForClient waits for the node's credentials.
func (p *PodNetwork) waitForClient(ctx context.Context) (kubernetes.Interface, error) {
	client, err := cni.WaitForClient(ctx, p.Kubeconfig, "edgeplane/pod-network")
	if err != nil && !errors.Is(err, context.Canceled) {
		klog.FromContext(ctx).Error(err, "No client for the pod network writer")
	}
	return client, err
}
