package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/join"
)

// joinFetchTimeout bounds the retries of the bootstrap data fetch: a new
// server's bootstrap token takes a moment to reach the authenticator.
const joinFetchTimeout = 30 * time.Second

// etcdJoin is this server's place in an embedded etcd cluster
// (--cluster-init or --server).
type etcdJoin struct {
	dataDir   string
	cluster   datastore.EtcdCluster
	token     join.Token
	haveToken bool
}

// prepareEtcdJoin runs before the certificates: a new server joining with
// --server fetches the cluster's CAs and keys into its data dir so that
// certs.Ensure issues its certificates from them. It returns nil unless
// --cluster-init or --server is set.
func (s *server) prepareEtcdJoin(ctx context.Context, o CompletedOptions) (*etcdJoin, error) {
	if !o.Cluster.etcdCluster() {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	name, err := datastore.MemberName(o.DataDir)
	if err != nil {
		return nil, err
	}
	host := o.BindAddress
	if host == nil || host.IsUnspecified() {
		host = o.AdvertiseAddress
	}
	j := &etcdJoin{dataDir: o.DataDir, cluster: datastore.EtcdCluster{
		Name: name, Host: host.String(), ClientPort: o.Cluster.EtcdClientPort, PeerPort: o.Cluster.EtcdPeerPort,
	}}
	if o.Cluster.Token != nil {
		j.token, j.haveToken = *o.Cluster.Token, true
	} else if j.token, j.haveToken, err = join.ReadTokenFile(o.DataDir); err != nil {
		return nil, err
	}

	_, statErr := os.Stat(filepath.Join(o.DataDir, "db", "etcd", "member"))
	member := statErr == nil
	switch {
	case member:
		logger.Info("Restarting this server's etcd member", "member", name)
	case o.Cluster.Server != "":
		logger.Info("Joining the cluster", "server", o.Cluster.Server, "member", name)
		f, err := fetchBootstrap(ctx, o.Cluster.Server, j.token)
		if err != nil {
			return nil, err
		}
		if _, err := f.Data.Apply(o.DataDir); err != nil {
			return nil, err
		}
		if len(f.EtcdEndpoints) == 0 {
			return nil, fmt.Errorf("the server at %s lists no etcd members", o.Cluster.Server)
		}
		j.token = f.Token
		j.cluster.JoinEndpoints = f.EtcdEndpoints
		if err := join.WriteTokenFile(o.DataDir, j.token); err != nil {
			return nil, err
		}
	default:
		logger.Info("Starting a new etcd cluster", "member", name)
	}
	if !j.haveToken && j.token.Secret == "" {
		if j.token.Secret, err = join.NewSecret(); err != nil {
			return nil, err
		}
	}
	return j, nil
}

// fetchBootstrap retries join.Fetch while the server refuses the token (it
// may not have reached the authenticator yet) or cannot be reached; any
// other error (a token that decrypts to another CA, a server that does not
// speak TLS) fails at once.
func fetchBootstrap(ctx context.Context, serverURL string, t join.Token) (*join.Fetched, error) {
	var (
		f       *join.Fetched
		lastErr error
	)
	err := wait.PollUntilContextTimeout(ctx, time.Second, joinFetchTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		f, err = join.Fetch(ctx, serverURL, t)
		if err == nil {
			return true, nil
		}
		lastErr = err
		if errors.Is(err, join.ErrUnavailable) || errors.Is(err, join.ErrTokenRefused) {
			klog.FromContext(ctx).V(2).Info("Bootstrap data not available yet", "err", err)
			return false, nil
		}
		return false, err
	})
	if err != nil {
		if lastErr != nil {
			return nil, lastErr
		}
		return nil, err
	}
	return f, nil
}

// datastoreCluster is the datastore's view; nil without an etcd cluster.
func (j *etcdJoin) datastoreCluster() *datastore.EtcdCluster {
	if j == nil {
		return nil
	}
	c := j.cluster
	return &c
}

// publish, once the API server is ready, writes the join token to the data
// dir and makes this server able to let others join (join.PublishForJoin).
func (j *etcdJoin) publish(ctx context.Context, pki *certs.PKI) error {
	if j == nil {
		return nil
	}
	data, err := join.Collect(j.dataDir)
	if err != nil {
		return err
	}
	ca := data[join.ServerCAFile]
	if err := j.token.VerifyCA(ca); err != nil {
		return fmt.Errorf("--token: %w", err)
	}
	j.token.CAHash = join.CAHash(ca)
	if err := join.WriteTokenFile(j.dataDir, j.token); err != nil {
		return err
	}
	sealed, err := data.Seal(j.token.Secret)
	if err != nil {
		return err
	}
	cs, err := kubeclient.New(pki.AdminKubeconfig, "etcd-join", kubeclient.Burst)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, sharedTimeout)
	defer cancel()
	clientURL := "https://" + net.JoinHostPort(j.cluster.Host, strconv.Itoa(j.cluster.ClientPort))
	if err := join.PublishForJoin(ctx, cs, j.token.Secret, sealed, clientURL); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Other servers can join with --server and the token `edgeplane token` prints",
		"member", j.cluster.Name, "etcd", clientURL)
	return nil
}
