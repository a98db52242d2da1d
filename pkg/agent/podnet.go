package agent

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

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

	cancel context.CancelFunc
	wg     sync.WaitGroup
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
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	p.cancel = cancel
	p.wg.Go(func() { p.run(runCtx) })
	return nil
}

// Ready is immediate: see the type's comment.
func (p *PodNetwork) Ready(context.Context) error { return nil }

// Stop ends the writer.
func (p *PodNetwork) Stop(ctx context.Context) error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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

// waitForClient waits for the node's kubeconfig and builds a client from it.
func (p *PodNetwork) waitForClient(ctx context.Context) (kubernetes.Interface, error) {
	return WaitForClient(ctx, p.Kubeconfig, "edgeplane/pod-network")
}
