package node

import (
	"context"
	"fmt"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

// LocalCA is a server's own node's credentials: its client certificate is
// minted from the server's client CA in this process (no token, no CSR),
// and its name is bound to its identity key before its kubelet starts, so
// that no node token can take it. Its serving certificate is minted too,
// from the kubelet-serving CA, and renewed while it runs: the node's
// addresses are the API server's, which the approver refuses in any CSR.
type LocalCA struct {
	PKI *certs.PKI
	// Server is how the node reaches the API: this process's listener.
	Server string
	// IPs are the node's addresses, as its kubelet reports them
	// (--node-ip): its serving certificate names them and the node name.
	IPs []net.IP
	// Admin binds the node's identity record.
	Admin kubernetes.Interface
	// Settings are the cluster's settings for nodes (the server's own).
	Settings nodeconfig.Config
	// Network is the cluster network (the server's choice).
	Network Network
}

var _ Credentials = (*LocalCA)(nil)

// bindWindow bounds the retries of the identity binding while the API
// server settles.
const bindWindow = time.Minute

// Ensure implements Credentials.
func (l *LocalCA) Ensure(ctx context.Context, node string, p Paths) (Cluster, error) {
	if _, err := certs.EnsureNodeClient(ctx, l.PKI, node, p.CertDir, p.Kubeconfig, l.Server); err != nil {
		return Cluster{}, err
	}
	id, err := loadIdentity(p)
	if err != nil {
		return Cluster{}, err
	}
	if err := bindOwn(ctx, l.Admin, node, id, "server"); err != nil {
		return Cluster{}, err
	}
	if err := markIdentityBound(p, id.fingerprint); err != nil {
		return Cluster{}, err
	}
	var dns []string
	if len(validation.IsDNS1123Subdomain(node)) == 0 {
		dns = []string{node}
	}
	mint := func(ctx context.Context) (string, string, error) {
		return certs.EnsureNodeServing(ctx, l.PKI, node, dns, l.IPs, p.CertDir)
	}
	certFile, keyFile, err := mint(ctx)
	if err != nil {
		return Cluster{}, err
	}
	return Cluster{
		Config: l.Settings, ClientCAFile: l.PKI.ClientCA.Cert, Network: l.Network,
		ServingCertFile: certFile, ServingKeyFile: keyFile,
		RenewServing: func(ctx context.Context) error { _, _, err := mint(ctx); return err },
	}, nil
}

// bindOwn binds node's name to id, or fails when it is bound to another
// node's identity.
func bindOwn(ctx context.Context, admin kubernetes.Interface, node string, id identity, by string) error {
	var held nodeidentity.Record
	var bound bool
	err := kubeclient.Retry(ctx, "binding the node's identity", bindWindow, func(ctx context.Context) error {
		var err error
		held, bound, err = nodeidentity.Bind(ctx, admin, nodeidentity.Record{Node: node, Fingerprint: id.fingerprint, BoundBy: by})
		return err
	})
	switch {
	case err != nil:
		return err
	case bound:
		klog.FromContext(ctx).Info("Bound the node's name to its identity", "node", node, "identity", id.fingerprint)
	case held.Fingerprint != id.fingerprint:
		return fmt.Errorf("node name %q is bound to another node's identity (%s, bound by %s at %s): this server cannot be that node; give it another --node-name, or, if that node is gone for good, run `edgeplane node forget %s` and start again",
			node, held.Fingerprint, held.BoundBy, held.BoundAt.UTC().Format(time.RFC3339), node)
	}
	return nil
}
