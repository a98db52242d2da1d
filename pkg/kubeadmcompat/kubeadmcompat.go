// Package kubeadmcompat publishes what kubeadm v1.37 publishes for joining
// nodes, so that a stock `kubeadm join` (and edgeplane's own agent) finds it:
//
//   - kube-public/cluster-info: a kubeconfig with the cluster CA and the
//     server URL, signed for each bootstrap token by the bootstrap signer
//     (pkg/controllers), and readable by anonymous users, that one object
//     only (Role and RoleBinding kubeadm:bootstrap-signer-clusterinfo);
//   - kube-system/kubeadm-config (a ClusterConfiguration) and
//     kube-system/kubelet-config (the KubeletConfiguration of nodes), readable
//     by node bootstrap tokens and nodes (Roles kubeadm:nodes-kubeadm-config
//     and kubeadm:kubelet-config);
//   - the ClusterRole and binding kubeadm:get-nodes (node bootstrap tokens may
//     get Nodes, as `kubeadm join` checks for a Node of its name).
//
// kubeadm's CSR bindings (kubeadm:kubelet-bootstrap,
// kubeadm:node-autoapprove-bootstrap and
// kubeadm:node-autoapprove-certificate-rotation) are not created:
// edgeplane's controllers.NodeBootstrapBindings let system:bootstrappers
// (every bootstrap token, kubeadm's node group included) create CSRs and
// system:nodes renew their own certificates, under edgeplane: names. There
// is no twin of kubeadm:node-autoapprove-bootstrap: a node token's client
// certificate request is edgeplane's CSR approver's to decide
// (pkg/csrapprover), which binds a node name to the key of its first
// request.
package kubeadmcompat

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
)

// Config is what the published objects say about the cluster.
type Config struct {
	// ServerURL is the API server's URL nodes use, https://HOST:PORT.
	ServerURL string
	// CAPEM is the cluster CA certificate file, byte for byte (the K10 token
	// pins its SHA-256).
	CAPEM []byte
	// KubernetesVersion is the API server's version, v1.37.2.
	KubernetesVersion string
	ServiceCIDR       string
	// ServiceCIDR and PodCIDR may be dual-stack, "a,b"; PodCIDR may be empty.
	PodCIDR       string
	ClusterDomain string
	// ClusterDNS is the cluster DNS Service's address(es); may be empty.
	ClusterDNS []net.IP
	// NodeLeaseDuration is the kubelets' node Lease duration (the cluster's
	// --node-heartbeat); 0 keeps the kubelet's default.
	NodeLeaseDuration time.Duration
}

// Validate returns every problem with c.
func (c Config) Validate() []error {
	var errs []error
	if u, err := url.Parse(c.ServerURL); err != nil || u.Scheme != "https" || u.Host == "" || u.Port() == "" {
		errs = append(errs, fmt.Errorf("kubeadmcompat: server URL %q: want https://HOST:PORT", c.ServerURL))
	}
	if block, _ := pem.Decode(c.CAPEM); block == nil || block.Type != "CERTIFICATE" {
		errs = append(errs, errors.New("kubeadmcompat: the cluster CA is not a PEM certificate"))
	} else if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		errs = append(errs, fmt.Errorf("kubeadmcompat: the cluster CA: %w", err))
	}
	if c.KubernetesVersion == "" {
		errs = append(errs, errors.New("kubeadmcompat: no Kubernetes version"))
	}
	for _, f := range []struct{ name, cidrs string }{{"service CIDR", c.ServiceCIDR}, {"pod CIDR", c.PodCIDR}} {
		if f.cidrs == "" && f.name == "pod CIDR" {
			continue
		}
		for _, cidr := range strings.Split(f.cidrs, ",") { // dual-stack: a,b
			if _, _, err := net.ParseCIDR(strings.TrimSpace(cidr)); err != nil {
				errs = append(errs, fmt.Errorf("kubeadmcompat: %s %q: %v", f.name, cidr, err))
			}
		}
	}
	if c.ClusterDomain == "" {
		errs = append(errs, errors.New("kubeadmcompat: no cluster domain"))
	}
	return errs
}

// Ensure creates or updates the objects listed in the package comment.
// It is safe to run on every start and on several servers; each run leaves
// the objects as this server's c says (the last server started wins the
// server URL in cluster-info). API errors are returned as they come, for the
// caller to retry.
func Ensure(ctx context.Context, client kubernetes.Interface, c Config) error {
	if errs := c.Validate(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	clusterInfo, err := clusterInfoConfigMap(c)
	if err != nil {
		return err
	}
	kubeadmConfig, err := kubeadmConfigMap(c)
	if err != nil {
		return err
	}
	kubeletConfig, err := kubeletConfigMap(c)
	if err != nil {
		return err
	}
	for _, cm := range []*corev1.ConfigMap{clusterInfo, kubeadmConfig, kubeletConfig} {
		if err := applyConfigMap(ctx, client, cm); err != nil {
			return err
		}
	}
	return applyRBAC(ctx, client)
}

// clusterInfoConfigMap is kube-public/cluster-info as kubeadm writes it: a
// kubeconfig with one unnamed cluster. The bootstrap signer adds the
// jws-kubeconfig-<id> keys; applyConfigMap keeps them.
func clusterInfoConfigMap(c Config) (*corev1.ConfigMap, error) {
	kc := clientcmdapi.Config{Clusters: map[string]*clientcmdapi.Cluster{
		"": {Server: c.ServerURL, CertificateAuthorityData: c.CAPEM},
	}}
	b, err := clientcmd.Write(kc)
	if err != nil {
		return nil, fmt.Errorf("kubeadmcompat: cluster-info kubeconfig: %w", err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: bootstrapapi.ConfigMapClusterInfo, Namespace: metav1.NamespacePublic},
		Data:       map[string]string{bootstrapapi.KubeConfigKey: string(b)},
	}, nil
}
