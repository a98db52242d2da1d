package node

import (
	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
	"github.com/edgeplane/edgeplane/pkg/kubelet"
	"github.com/edgeplane/edgeplane/pkg/nodetunnel"
)

// tunnel is an agent's node tunnel (pkg/nodetunnel), nil when off or in a
// server: a tunnel to every server the node-local API endpoint knows (the
// server of the node's kubeconfig without one), with the node's own client
// certificate, for the node's own kubelet only.
func (n *Node) tunnel(endpoint *apiendpoint.Endpoint) (*nodetunnel.Agent, error) {
	mode := n.cfg.Tunnel
	if n.cfg.InServer || mode == "" || mode == nodetunnel.ModeOff {
		return nil, nil
	}
	server, certFile, err := kubeconfigServer(n.paths.Kubeconfig)
	if err != nil {
		return nil, err
	}
	servers := func() []string { return []string{server} }
	if endpoint != nil {
		servers = func() []string {
			if s := endpoint.Servers(); len(s) > 0 {
				return s
			}
			return []string{server}
		}
	}
	return nodetunnel.NewAgent(nodetunnel.AgentOptions{
		Mode:        mode,
		Servers:     servers,
		CAFile:      n.paths.ServerCA,
		CertFile:    certFile,
		KubeletPort: kubelet.APIPort(n.cfg.Settings.KubeletArgs),
	})
}
