package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/join"
)

// logKubeletTrust says, at each start during the kubelet-serving transition,
// that the API server also trusts the cluster CA for kubelets and until when.
func logKubeletTrust(ctx context.Context, pki *certs.PKI) {
	if until := pki.KubeletServerCATrustedUntil; time.Now().Before(until) {
		klog.FromContext(ctx).Info("Transition to the kubelet-serving CA: the API server also trusts kubelet serving certificates from the cluster CA, until the first start after the last of them expires",
			"until", until.UTC(), "kubeletServingCA", pki.KubeletServingCA.Cert)
	}
}

// shareKubeletCA runs shareKubeletServingCA when other servers share this
// one's datastore, and then certs.Ensure again if it replaced the CA.
func (s *server) shareKubeletCA(ctx context.Context, o CompletedOptions, port int, shared *sharedStore, etcdJoin *etcdJoin) error {
	var secret string
	switch {
	case shared != nil && shared.shared:
		secret = shared.token.Secret
	case etcdJoin != nil:
		secret = etcdJoin.token.Secret
	default:
		return nil
	}
	replaced, err := shareKubeletServingCA(ctx, s.store, s.pki, secret)
	if err != nil || !replaced {
		return err
	}
	pki, err := certs.Ensure(ctx, certOptions(o, port))
	if err != nil {
		return err
	}
	s.pki = pki
	return nil
}

// shareKubeletServingCA makes every server of a cluster that shares a
// datastore sign and verify kubelet serving certificates with one
// kubelet-serving CA: the first to start with it stores its own in the
// datastore (sealed with the join token's secret, as the bootstrap data
// is), every later one adopts that one. A cluster created with the CA has
// it in its bootstrap data already and finds the same one stored; on a
// cluster from before it, every server created one of its own at this
// start (certs.Ensure), and all but the first replace theirs, which nothing
// has used yet: the API server and controllers start after this. It
// reports whether it replaced this server's; run certs.Ensure again then.
func shareKubeletServingCA(ctx context.Context, store datastore.Datastore, pki *certs.PKI, secret string) (bool, error) {
	mine := join.Data{}
	for i, path := range []string{pki.KubeletServingCA.Cert, pki.KubeletServingCA.Key} {
		b, err := readFile(path)
		if err != nil {
			return false, err
		}
		mine[join.KubeletServingCAFiles[i]] = b
	}
	blob, err := mine.Seal(secret)
	if err != nil {
		return false, err
	}
	var won bool
	stored, err := withClient(ctx, store, func(ctx context.Context, kv kvClient) ([]byte, error) {
		stored, w, err := join.PublishKubeletServingCA(ctx, kv, blob)
		won = w
		return stored, err
	})
	if err != nil || won {
		return false, err
	}
	theirs, err := join.Open(stored, secret)
	if err != nil {
		return false, fmt.Errorf("the kubelet-serving CA in the datastore: %w", err)
	}
	crt, key := theirs[join.KubeletServingCAFiles[0]], theirs[join.KubeletServingCAFiles[1]]
	if len(crt) == 0 || len(key) == 0 {
		return false, errors.New("the kubelet-serving CA in the datastore lacks its certificate or key")
	}
	if bytes.Equal(crt, mine[join.KubeletServingCAFiles[0]]) && bytes.Equal(key, mine[join.KubeletServingCAFiles[1]]) {
		return false, nil
	}
	if err := certs.ReplaceKubeletServingCA(pki, crt, key); err != nil {
		return false, err
	}
	klog.FromContext(ctx).Info("Adopted the cluster's kubelet-serving CA from the datastore in place of this server's", "cert", pki.KubeletServingCA.Cert)
	return true, nil
}
