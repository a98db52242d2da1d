package node

import (
	"fmt"
	"net"
	"net/url"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
)

// PartAPIEndpoint is the node-local API endpoint's --disable name.
const PartAPIEndpoint = "api-endpoint"

// localAPIServer is what the node's parts dial when the endpoint runs: the
// servers' serving certificates cover 127.0.0.1 (pkg/certs), so TLS
// passes through unchanged.
var localAPIServer = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(apiendpoint.DefaultPort))

// apiEndpoint is an agent's node-local API endpoint, first contact the
// server of the node's kubeconfig (its --server), and the paths the other
// parts use: their kubeconfig (p.LocalKubeconfig) points at the endpoint.
func apiEndpoint(p Paths) (*apiendpoint.Endpoint, Paths, error) {
	cfg, err := clientcmd.LoadFromFile(p.Kubeconfig)
	if err != nil {
		return nil, p, fmt.Errorf("node API endpoint: %s: %w", p.Kubeconfig, err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	if cur == nil || cfg.Clusters[cur.Cluster] == nil || cfg.AuthInfos[cur.AuthInfo] == nil {
		return nil, p, fmt.Errorf("node API endpoint: %s has no current cluster and user", p.Kubeconfig)
	}
	u, err := url.Parse(cfg.Clusters[cur.Cluster].Server)
	if err != nil || u.Host == "" {
		return nil, p, fmt.Errorf("node API endpoint: %s: server %q is not a URL", p.Kubeconfig, cfg.Clusters[cur.Cluster].Server)
	}
	server := u.Host
	if u.Port() == "" {
		server = net.JoinHostPort(u.Hostname(), "443")
	}
	local := p
	local.Kubeconfig = p.LocalKubeconfig
	if err := writeKubeconfig(local, localAPIServer, p.ServerCA, cfg.AuthInfos[cur.AuthInfo].ClientCertificate); err != nil {
		return nil, p, err
	}
	e, err := apiendpoint.New(apiendpoint.Config{
		Server: server, StateFile: p.APIServers, CAFile: p.ServerCA, Kubeconfig: local.Kubeconfig,
	})
	if err != nil {
		return nil, p, err
	}
	return e, local, nil
}
