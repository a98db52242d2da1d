package bootstrap

import (
	"context"

	"k8s.io/client-go/informers"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/chain"
	"github.com/edgeplane/edgeplane/pkg/nodetunnel"
)

// newNodeTunnel builds the server's end of node tunnels (pkg/nodetunnel),
// before the chain that serves it on the API port and dials through it.
func (s *server) newNodeTunnel() error {
	client, err := kubeclient.New(s.pki.AdminKubeconfig, nodetunnel.Name, kubeclient.Steady)
	if err != nil {
		return err
	}
	s.tunnel = nodetunnel.NewServer(nodetunnel.ServerOptions{
		Client: client, AddressTypes: chain.KubeletAddressTypes,
		// The API server's Nodes: the chain exists once the tunnel starts.
		Informers: func() informers.SharedInformerFactory { return s.chain.Informers() },
	})
	return nil
}

// clusterNetwork is the chain's dialer of kubelets and the tunnel's path.
func (s *server) clusterNetwork() chain.ClusterNetwork {
	return chain.ClusterNetwork{Dial: s.tunnel.DialContext, Wrap: s.tunnel.Handler}
}

// startNodeTunnel starts watching the Nodes the tunnel routes by.
func (s *server) startNodeTunnel(ctx context.Context) error {
	return s.mgr.Start(ctx, s.tunnel, stopTimeout)
}
