package node

import (
	"fmt"
	"net"
	"net/url"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/pkg/apicache"
	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
)

// PartAPIEndpoint is the node-local API endpoint's --disable name, and
// PartAPICache its cache's (pkg/apicache): off, the endpoint passes TLS
// through and keeps nothing.
const (
	PartAPIEndpoint = "api-endpoint"
	PartAPICache    = "api-cache"
)

// apiEndpoint is an agent's node-local API endpoint on 127.0.0.1:port (0:
// apiendpoint.DefaultPort), first contact the server of the node's
// kubeconfig (its --server), and the paths the other parts use: their
// kubeconfig (p.LocalKubeconfig) points at the endpoint. With the cache
// (cache true), the cache listens there and terminates TLS with a
// certificate of its own CA (the kubeconfig names that CA) and the
// endpoint only dials for it; without, the servers' serving certificates
// cover 127.0.0.1 (pkg/certs) and TLS passes through unchanged.
func apiEndpoint(node string, p Paths, port int, cache bool) (*apiendpoint.Endpoint, *apicache.Cache, Paths, error) {
	if port == 0 {
		port = apiendpoint.DefaultPort
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	server, certFile, err := kubeconfigServer(p.Kubeconfig)
	if err != nil {
		return nil, nil, p, err
	}
	local := p
	local.Kubeconfig = p.LocalKubeconfig
	caFile := p.ServerCA
	if cache {
		caFile = apicache.LocalCAFile(p.APICache)
	}
	if err := writeKubeconfig(local, "https://"+listen, caFile, certFile); err != nil {
		return nil, nil, p, err
	}
	e, err := apiendpoint.New(apiendpoint.Config{
		Listen: listen, DialOnly: cache, Server: server, StateFile: p.APIServers, CAFile: p.ServerCA, Kubeconfig: local.Kubeconfig,
	})
	if err != nil {
		return nil, nil, p, err
	}
	if !cache {
		return e, nil, local, nil
	}
	c, err := apicache.New(apicache.Config{
		Node: node, Listen: listen, Dir: p.APICache, ClientCAFile: p.ClientCA,
		ServerCAFile: p.ServerCA, CertFile: certFile, Upstream: e,
	})
	if err != nil {
		return nil, nil, p, err
	}
	return e, c, local, nil
}

// endpointParts are the endpoint and its cache (when cache) in the order
// they start: the cache first, as it writes the CA the parts' kubeconfig
// names, which the endpoint's own watch reads; the cache's requests wait
// until the endpoint has checked the servers.
func endpointParts(node string, p Paths, port int, cache bool) ([]component.Component, *apiendpoint.Endpoint, Paths, error) {
	e, c, local, err := apiEndpoint(node, p, port, cache)
	if err != nil {
		return nil, nil, p, err
	}
	if c == nil {
		return []component.Component{e}, e, local, nil
	}
	return []component.Component{c, e}, e, local, nil
}

// kubeconfigServer is the server (host:port) and the client certificate
// file of the kubeconfig at path.
func kubeconfigServer(path string) (server, certFile string, err error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", "", fmt.Errorf("node API endpoint: %s: %w", path, err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	if cur == nil || cfg.Clusters[cur.Cluster] == nil || cfg.AuthInfos[cur.AuthInfo] == nil {
		return "", "", fmt.Errorf("node API endpoint: %s has no current cluster and user", path)
	}
	raw := cfg.Clusters[cur.Cluster].Server
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return "", "", fmt.Errorf("node API endpoint: %s: server %q is not an https URL", path, raw)
	}
	return hostPort(u), cfg.AuthInfos[cur.AuthInfo].ClientCertificate, nil
}

// hostPort is the host:port an https URL names (port 443 when it names
// none).
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}
