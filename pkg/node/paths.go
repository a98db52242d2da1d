package node

import (
	"path/filepath"

	"github.com/edgeplane/edgeplane/pkg/apicache"
	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

// DirName is a node's directory under the data dir: <data-dir>/agent, for
// `edgeplane agent` and for a server that is its own node.
const DirName = "agent"

// Paths are a node's files, under its directory.
type Paths struct {
	Dir string
	// ServerCA is the cluster CA, as the node's join discovered it.
	ServerCA string
	// ClientCA is the CA of the clients the kubelet's API accepts (the API
	// server's kubelet client certificate chains to it).
	ClientCA string
	// Kubeconfig is the node's own kubeconfig: the kubelet's, and every
	// other node component's.
	Kubeconfig string
	// LocalKubeconfig is Kubeconfig with the node-local API endpoint for
	// server (pkg/apiendpoint): what the node's parts use when it runs.
	LocalKubeconfig string
	// APIServers are the API servers the endpoint learned, for its next
	// start.
	APIServers string
	// APICache is the node's API cache's directory (pkg/apicache): what
	// the parts read, Secrets and tokens among it (0700, its files 0600).
	APICache string
	// ClusterSettings are the cluster's settings for nodes as the node
	// last read them from a server, for a start with no server answering.
	ClusterSettings string
	// IdentityKey is the node's identity key (pkg/nodeidentity), and
	// IdentityBound records that the server bound the node's name to it.
	IdentityKey   string
	IdentityBound string
	// RootDir is the kubelet's --root-dir; CertDir its rotated certificates.
	RootDir string
	CertDir string
	// Images is the airgap images directory.
	Images string
	// PauseImage is where the embedded pause image is written for its
	// import.
	PauseImage string
	// Flannel is flannel's directory (its network configuration).
	Flannel string
	// IPAM is the CNI host-local plugin's state directory (the pod
	// addresses the node has handed out, in IPAM/<network>).
	IPAM string
	// Containerd is the managed containerd's directory (pkg/containerd):
	// ContainerdConfig is its generated config.toml, ContainerdTemplate a
	// user's config.toml.tmpl, ContainerdSocket its CRI and API socket,
	// ContainerdCerts the registries' certs.d tree of hosts.toml files,
	// ContainerdLog its log, ContainerdRoot and ContainerdState its own
	// root and state directories.
	Containerd         string
	ContainerdConfig   string
	ContainerdTemplate string
	ContainerdSocket   string
	ContainerdCerts    string
	ContainerdLog      string
	ContainerdRoot     string
	ContainerdState    string
}

// PathsIn lays the files out under dir.
func PathsIn(dir string) Paths {
	ctd := filepath.Join(dir, "containerd")
	return Paths{
		Dir:             dir,
		ServerCA:        filepath.Join(dir, "server-ca.crt"),
		ClientCA:        filepath.Join(dir, "client-ca.crt"),
		Kubeconfig:      filepath.Join(dir, "kubelet.kubeconfig"),
		LocalKubeconfig: filepath.Join(dir, "local-api.kubeconfig"),
		APIServers:      filepath.Join(dir, apiendpoint.StateFileName),
		APICache:        filepath.Join(dir, apicache.DirName),
		ClusterSettings: filepath.Join(dir, "cluster-settings.json"),
		IdentityKey:     nodeidentity.KeyPath(dir),
		IdentityBound:   filepath.Join(dir, "node-identity.bound"),
		RootDir:         filepath.Join(dir, "kubelet"),
		CertDir:         filepath.Join(dir, "kubelet", "pki"),
		Images:          filepath.Join(dir, "images"),
		PauseImage:      filepath.Join(dir, "pause-image"),
		Flannel:         filepath.Join(dir, "flannel"),
		IPAM:            filepath.Join(dir, "cni", "networks"),

		Containerd:         ctd,
		ContainerdConfig:   filepath.Join(ctd, containerd.ConfigFile),
		ContainerdTemplate: filepath.Join(ctd, containerd.TemplateFile),
		ContainerdSocket:   filepath.Join(ctd, containerd.SocketFile),
		ContainerdCerts:    filepath.Join(ctd, containerd.CertsDir),
		ContainerdLog:      filepath.Join(ctd, containerd.LogFile),
		ContainerdRoot:     filepath.Join(ctd, containerd.RootDir),
		ContainerdState:    filepath.Join(ctd, containerd.StateDir),
	}
}

// staleBootstrapKubeconfig is where nodes of earlier versions kept a
// kubeconfig holding their node token for the kubelet's own TLS bootstrap;
// a node now bootstraps before its kubelet starts and keeps no token on
// disk, so a join removes it.
func staleBootstrapKubeconfig(p Paths) string { return filepath.Join(p.Dir, "bootstrap.kubeconfig") }
