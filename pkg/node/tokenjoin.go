package node

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// TokenJoin is an agent's credentials: a node token, used once.
//
// A node that joined before and holds a current client certificate starts
// from it, without the token (which may have expired since). Otherwise the
// cluster CA is discovered with the token and checked against the token's
// pin before anything is written; then the node asks, with the token, for a
// client certificate of its identity key (pkg/nodeidentity), which the
// server grants only to the node that first joined under that name. An
// unreachable server is retried with backoff, logged once a window; a CA
// that does not match, a token the server does not know, or a refused
// certificate end the join with an error saying what to do. Each read of
// the cluster's settings is kept on disk; a node that holds a current
// certificate and finds no server answering starts from those
// (clusterOrKept).
type TokenJoin struct {
	// Server is the URL of a server, https://host:port.
	Server string
	Token  nodetoken.Token
	// PrepareDir is called once, after the server's CA has been checked
	// against the token's pin and before the node's first file is written
	// (it creates and locks the data dir). nil: nothing to prepare.
	PrepareDir func() error
	// RetryWindow is how often an unreachable server is logged (0: a
	// minute).
	RetryWindow time.Duration
}

var _ Credentials = (*TokenJoin)(nil)

// partJoin is the join's name in user agents and errors.
const partJoin = "node-join"

// Ensure implements Credentials.
func (j *TokenJoin) Ensure(ctx context.Context, node string, p Paths) (Cluster, error) {
	logger := klog.FromContext(ctx)
	state, err := loadCredentials(p, time.Now())
	if err != nil {
		return Cluster{}, err
	}
	if state == credValid {
		logger.Info("Starting with the node's existing credentials", "kubeconfig", p.Kubeconfig)
		if err := j.prepare(); err != nil {
			return Cluster{}, err
		}
		// The kubeconfig follows --server (a server that moved).
		store, err := clientCertStore(p)
		if err != nil {
			return Cluster{}, err
		}
		if err := writeKubeconfig(p, j.Server, p.ServerCA, store.CurrentPath()); err != nil {
			return Cluster{}, err
		}
		client, err := kubeclient.New(p.Kubeconfig, partJoin, kubeclient.Burst)
		if err != nil {
			return Cluster{}, err
		}
		// --server may be down while other servers answer: the servers
		// the node's API endpoint learned are tried too; with none
		// answering, the settings kept at an earlier start serve.
		clients, err := savedServerClients(ctx, p, j.Server)
		if err != nil {
			return Cluster{}, err
		}
		cluster, err := clusterOrKept(ctx, append([]kubernetes.Interface{client}, clients...), p)
		if err != nil {
			return Cluster{}, err
		}
		if !cluster.Offline {
			enroll(ctx, client, node, p, j.Server)
		}
		return cluster, nil
	}
	if state == credExpired {
		logger.Info("The node's client certificate has expired: joining again with the node token", "kubeconfig", p.Kubeconfig)
	}

	caPEM, err := j.discover(ctx)
	if err != nil {
		return Cluster{}, err
	}
	if err := j.prepare(); err != nil {
		return Cluster{}, err
	}
	if err := writeFile(p.ServerCA, caPEM, 0o644); err != nil {
		return Cluster{}, err
	}
	if err := os.Remove(staleBootstrapKubeconfig(p)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Cluster{}, fmt.Errorf("node: %w", err)
	}
	boot, err := j.bootstrapClient(p.ServerCA)
	if err != nil {
		return Cluster{}, err
	}
	if err := bootstrapClientCert(ctx, boot, node, p, j.Server); err != nil {
		return Cluster{}, err
	}
	client, err := kubeclient.New(p.Kubeconfig, partJoin, kubeclient.Burst)
	if err != nil {
		return Cluster{}, err
	}
	return fetchCluster(ctx, []kubernetes.Interface{client}, p)
}

// prepare calls PrepareDir once.
func (j *TokenJoin) prepare() error {
	if j.PrepareDir == nil {
		return nil
	}
	f := j.PrepareDir
	j.PrepareDir = nil
	return f()
}

// discover fetches the cluster CA with the token, retrying while the server
// cannot be reached.
func (j *TokenJoin) discover(ctx context.Context) ([]byte, error) {
	logger := klog.FromContext(ctx)
	window := j.RetryWindow
	if window == 0 {
		window = time.Minute
	}
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}
	var lastLog time.Time
	attempts := 0
	for {
		caPEM, err := nodetoken.Discover(ctx, j.Server, j.Token)
		if err == nil {
			return caPEM, nil
		}
		if !errors.Is(err, nodetoken.ErrUnreachable) {
			return nil, err
		}
		attempts++
		if time.Since(lastLog) >= window {
			logger.Info("Cannot reach the server yet, retrying with backoff", "server", j.Server, "attempts", attempts, "err", err.Error())
			lastLog, attempts = time.Now(), 0
		}
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("node: server %s not reached: %w", j.Server, err)
		case <-t.C:
		}
	}
}

// bootstrapClient authenticates with the node token and trusts the CA the
// discovery checked, kept in memory only: the token is written nowhere.
func (j *TokenJoin) bootstrapClient(caFile string) (kubernetes.Interface, error) {
	cfg := &rest.Config{
		Host:            j.Server,
		BearerToken:     j.Token.BootstrapToken(),
		TLSClientConfig: rest.TLSClientConfig{CAFile: caFile},
		UserAgent:       kubeclient.UserAgent(partJoin),
		Timeout:         30 * time.Second,
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return client, nil
}

// fetchCluster reads the cluster's settings for nodes with the node's own
// credentials, keeps them on disk (Paths.ClusterSettings), and writes the
// client CA the kubelet authenticates the API server with. A server that
// is still starting is waited for; a refusal (the node's certificate is
// not accepted) ends it at once. With several clients (one per server),
// each retry asks the next.
func fetchCluster(ctx context.Context, clients []kubernetes.Interface, p Paths) (Cluster, error) {
	var nc nodeconfig.Config
	attempt := 0
	err := kubeclient.Retry(ctx, "node: reading the cluster's settings for nodes", 2*time.Minute, func(ctx context.Context) error {
		client := clients[attempt%len(clients)]
		attempt++
		if len(clients) > 1 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, fetchAttemptTimeout)
			defer cancel()
		}
		var err error
		nc, err = nodeconfig.Fetch(ctx, client)
		return err
	})
	if err != nil {
		return Cluster{}, err
	}
	return keepCluster(ctx, nc, p)
}

// fetchAttemptTimeout bounds one server's answer when there are others to
// ask: a server whose host is gone does not refuse, it never answers.
const fetchAttemptTimeout = 10 * time.Second

// savedServerClients are clients, with the node's credentials, of the
// servers the node's API endpoint kept on disk (p.APIServers) other than
// first (the --server URL). A state file that cannot be read is logged and
// ignored: the node goes on with --server.
func savedServerClients(ctx context.Context, p Paths, first string) ([]kubernetes.Interface, error) {
	saved, err := apiendpoint.LoadServers(p.APIServers)
	if err != nil {
		klog.FromContext(ctx).Info("Ignoring the API servers kept on disk, using --server only", "err", err.Error())
		return nil, nil
	}
	if len(saved) == 0 {
		return nil, nil
	}
	base, err := kubeclient.Config(p.Kubeconfig, partJoin, kubeclient.Burst)
	if err != nil {
		return nil, err
	}
	var clients []kubernetes.Interface
	for _, addr := range saved {
		server := "https://" + addr
		if sameServer(server, first) {
			continue
		}
		cfg := rest.CopyConfig(base)
		cfg.Host = server
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		clients = append(clients, client)
	}
	return clients, nil
}

// sameServer tells whether two https URLs name the same host and port.
func sameServer(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return hostPort(ua) == hostPort(ub)
}

// writeKubeconfig writes the node's kubeconfig: server, the CA file, and
// the kubelet's current client certificate and key (one file).
func writeKubeconfig(p Paths, server, caFile, certFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["edgeplane"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: certFile}
	cfg.Contexts["edgeplane"] = &clientcmdapi.Context{Cluster: "edgeplane", AuthInfo: "node"}
	cfg.CurrentContext = "edgeplane"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("node: kubeconfig: %w", err)
	}
	return writeFile(p.Kubeconfig, data, 0o600)
}

// writeFile writes data to path atomically and durably, unless it already
// holds exactly that.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if _, err := atomicfile.Write(path, data, mode); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// identityBound reports whether the node recorded that the server bound
// its name to the identity key of fingerprint fp.
func identityBound(p Paths, fp string) bool {
	b, err := os.ReadFile(p.IdentityBound)
	return err == nil && string(b) == fp+"\n"
}

// markIdentityBound records that the server bound the node's name to fp.
func markIdentityBound(p Paths, fp string) error {
	return writeFile(p.IdentityBound, []byte(fp+"\n"), 0o600)
}

// loadIdentity is the node's identity key and its fingerprint, created at
// the node's first join.
func loadIdentity(p Paths) (keyFP identity, err error) {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return identity{}, fmt.Errorf("node: %w", err)
	}
	key, _, err := nodeidentity.LoadOrCreateKey(p.IdentityKey)
	if err != nil {
		return identity{}, err
	}
	fp, err := nodeidentity.Fingerprint(key.Public())
	if err != nil {
		return identity{}, err
	}
	return identity{key: key, fingerprint: fp}, nil
}
