package bootstrap

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// dropForeignServing removes a serving certificate of the server's own
// kubelet that the kubelet-serving CA did not sign (one from the cluster CA,
// issued before this data dir had a kubelet-serving CA), before the kubelet
// starts: it then asks for a new one, signed by the kubelet-serving CA.
func dropForeignServing(ctx context.Context, pki *certs.PKI, certDir string) error {
	ca, err := readFile(pki.KubeletServingCA.Cert)
	if err != nil {
		return err
	}
	_, err = certs.DropForeignKubeletServing(ctx, certDir, ca)
	return err
}

// logKubeletTrust says, at each start during the kubelet-serving transition,
// that the API server also trusts the cluster CA for kubelets and until when.
func logKubeletTrust(ctx context.Context, pki *certs.PKI) {
	if until := pki.KubeletServerCATrustedUntil; time.Now().Before(until) {
		klog.FromContext(ctx).Info("Transition to the kubelet-serving CA: the API server also trusts kubelet serving certificates from the cluster CA, until the first start after the last of them expires",
			"until", until.UTC(), "kubeletServingCA", pki.KubeletServingCA.Cert)
	}
}
