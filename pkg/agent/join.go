// Package agent holds what makes a host a node of an edgeplane cluster: the
// join (discovery of the cluster CA with a node token, the kubelet's
// bootstrap credentials, the cluster's settings for nodes), the airgap
// images, and the pod network configuration. pkg/bootstrap runs these, with
// the kubelet (pkg/kubelet), for `edgeplane agent` and for a server that is
// its own node.
package agent

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// Files of a node under its state directory (<data-dir>/agent).
const (
	serverCAFile            = "server-ca.crt"
	clientCAFile            = "client-ca.crt"
	bootstrapKubeconfigFile = "bootstrap.kubeconfig"
	kubeletKubeconfigFile   = "kubelet.kubeconfig"
)

// ErrNodeExists means a Ready node of the same name is already in the cluster.
var ErrNodeExists = errors.New("a node of that name is already in the cluster")

// Paths are a node's credential files.
type Paths struct {
	Dir                 string
	ServerCA            string
	ClientCA            string
	BootstrapKubeconfig string
	Kubeconfig          string
	// RootDir is the kubelet's --root-dir; CertDir its rotated certificates.
	RootDir string
	CertDir string
	// Images is the airgap images directory.
	Images string
}

// PathsIn lays the files out under dir.
func PathsIn(dir string) Paths {
	return Paths{
		Dir:                 dir,
		ServerCA:            filepath.Join(dir, serverCAFile),
		ClientCA:            filepath.Join(dir, clientCAFile),
		BootstrapKubeconfig: filepath.Join(dir, bootstrapKubeconfigFile),
		Kubeconfig:          filepath.Join(dir, kubeletKubeconfigFile),
		RootDir:             filepath.Join(dir, "kubelet"),
		CertDir:             filepath.Join(dir, "kubelet", "pki"),
		Images:              filepath.Join(dir, "images"),
	}
}

// JoinConfig is what an agent joins with.
type JoinConfig struct {
	Server   string // https://host:port
	Token    nodetoken.Token
	NodeName string
	Paths    Paths
	// RetryWindow is how often an unreachable server is logged (0: a minute).
	RetryWindow time.Duration
}

// Join prepares a node's credentials. A node that joined before and still
// holds a valid client certificate starts from it, without its token (which
// may have expired since). Otherwise the cluster CA is discovered with the
// token and checked against the token's pin before anything is written.
// An unreachable server is retried with backoff, logged once a window; a
// CA that does not match, a token the server does not know, or a Ready node
// of the same name end the join with an error saying what to do.
func Join(ctx context.Context, c JoinConfig) (nodeconfig.Config, error) {
	logger := klog.FromContext(ctx)
	p := c.Paths
	if ok, err := hasNodeCredentials(p); err != nil {
		return nodeconfig.Config{}, err
	} else if ok {
		logger.Info("Starting with the node's existing credentials", "kubeconfig", p.Kubeconfig)
		return fetchNodeConfig(ctx, p, p.Kubeconfig)
	}

	caPEM, err := discover(ctx, c)
	if err != nil {
		return nodeconfig.Config{}, err
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return nodeconfig.Config{}, fmt.Errorf("agent: %w", err)
	}
	if err := writeFile(p.ServerCA, caPEM, 0o644); err != nil {
		return nodeconfig.Config{}, err
	}
	boot := bootstrapKubeconfig(c.Server, p.ServerCA, c.Token)
	data, err := clientcmd.Write(*boot)
	if err != nil {
		return nodeconfig.Config{}, fmt.Errorf("agent: bootstrap kubeconfig: %w", err)
	}
	if err := writeFile(p.BootstrapKubeconfig, data, 0o600); err != nil {
		return nodeconfig.Config{}, err
	}
	if err := checkNodeName(ctx, p.BootstrapKubeconfig, c.NodeName); err != nil {
		return nodeconfig.Config{}, err
	}
	return fetchNodeConfig(ctx, p, p.BootstrapKubeconfig)
}

// discover fetches the cluster CA with the token, retrying while the server
// cannot be reached.
func discover(ctx context.Context, c JoinConfig) ([]byte, error) {
	logger := klog.FromContext(ctx)
	window := c.RetryWindow
	if window == 0 {
		window = time.Minute
	}
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}
	var lastLog time.Time
	attempts := 0
	for {
		caPEM, err := nodetoken.Discover(ctx, c.Server, c.Token)
		if err == nil {
			return caPEM, nil
		}
		if !errors.Is(err, nodetoken.ErrUnreachable) {
			return nil, err
		}
		attempts++
		if time.Since(lastLog) >= window {
			logger.Info("Cannot reach the server yet, retrying with backoff", "server", c.Server, "attempts", attempts, "err", err.Error())
			lastLog, attempts = time.Now(), 0
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("agent: server %s not reached: %w", c.Server, err)
		case <-time.After(backoff.Step()):
		}
	}
}

// hasNodeCredentials reports whether the kubelet's kubeconfig holds a client
// certificate that is still valid (the kubelet rotates it while it runs).
func hasNodeCredentials(p Paths) (bool, error) {
	if _, err := os.Stat(p.ServerCA); err != nil {
		return false, nil
	}
	cfg, err := clientcmd.LoadFromFile(p.Kubeconfig)
	if err != nil {
		return false, nil
	}
	for _, auth := range cfg.AuthInfos {
		certFile := auth.ClientCertificate
		if certFile == "" {
			continue
		}
		data, err := os.ReadFile(certFile)
		if err != nil {
			return false, nil
		}
		for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
			if block.Type != "CERTIFICATE" {
				continue
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return false, nil
			}
			return time.Now().Before(cert.NotAfter), nil
		}
	}
	return false, nil
}

func bootstrapKubeconfig(server, caFile string, tok nodetoken.Token) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["edgeplane"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["kubelet-bootstrap"] = &clientcmdapi.AuthInfo{Token: tok.BootstrapToken()}
	cfg.Contexts["edgeplane"] = &clientcmdapi.Context{Cluster: "edgeplane", AuthInfo: "kubelet-bootstrap"}
	cfg.CurrentContext = "edgeplane"
	return cfg
}

func clientFor(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("agent: %s: %w", kubeconfig, err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "edgeplane/agent"
	cfg.Timeout = 15 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// checkNodeName refuses to join as a node that already exists and is Ready:
// its kubelet is running elsewhere, and two kubelets would fight over one
// Node. The bootstrap token may read Nodes (kubeadm's kubeadm:get-nodes).
func checkNodeName(ctx context.Context, kubeconfig, name string) error {
	client, err := clientFor(kubeconfig)
	if err != nil {
		return err
	}
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsForbidden(err):
		klog.FromContext(ctx).V(1).Info("The token may not read Nodes: not checking the node name", "node", name)
		return nil
	case err != nil:
		return fmt.Errorf("agent: checking whether node %s exists: %w", name, err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return fmt.Errorf("%w: node %q is Ready, so its kubelet runs on another host; give this host another name (--node-name), or delete the node first (kubectl delete node %s) if it was this host's", ErrNodeExists, name, name)
		}
	}
	return nil
}

// fetchNodeConfig reads the cluster's settings for nodes and writes the
// client CA the kubelet authenticates the API server with.
func fetchNodeConfig(ctx context.Context, p Paths, kubeconfig string) (nodeconfig.Config, error) {
	client, err := clientFor(kubeconfig)
	if err != nil {
		return nodeconfig.Config{}, err
	}
	var nc nodeconfig.Config
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nc, err = nodeconfig.Fetch(ctx, client)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
			return false, fmt.Errorf("agent: the server refused the node's credentials: %w", err)
		default:
			return false, nil
		}
	})
	if err != nil {
		return nodeconfig.Config{}, fmt.Errorf("agent: reading the cluster's node settings: %w", err)
	}
	if err := writeFile(p.ClientCA, nc.ClientCA, 0o644); err != nil {
		return nodeconfig.Config{}, err
	}
	return nc, nil
}

// writeFile writes data to path atomically and durably, unless it already
// holds exactly that.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if _, err := atomicfile.Write(path, data, mode); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}
