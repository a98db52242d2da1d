// Package nodeconfig is what a server tells joining nodes about the cluster
// beyond cluster-info: the CA of the clients allowed to call a kubelet (the
// API server's kubelet client certificate chains to it), the CA that signs
// kubelet serving certificates, the cluster DNS settings and whether nodes
// run privileged containers. It lives in the ConfigMap
// kube-system/edgeplane-node-config, readable by nodes and by bootstrap
// tokens, nothing else: an agent reads it
// with its bootstrap token over a connection already pinned to the cluster
// CA, before its kubelet starts.
package nodeconfig

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
)

// Names of the ConfigMap and of the Role and RoleBinding that open it.
const (
	Name      = "edgeplane-node-config"
	Namespace = metav1.NamespaceSystem
	roleName  = "edgeplane:node-config-reader"

	keyClientCA      = "client-ca.crt"
	keyKubeletCA     = "kubelet-serving-ca.crt"
	keyClusterDomain = "cluster-domain"
	keyClusterDNS    = "cluster-dns"
	keyClusterCIDR   = "cluster-cidr"
	keyFlannel       = "flannel-backend"
	keyKubeProxy     = "kube-proxy-mode"
	keyLease         = "node-lease-duration"
	keyPrivileged    = "allow-privileged"
	keyLocalStorage  = "local-storage-path"
)

// Config is the cluster's settings for nodes.
type Config struct {
	// ClientCA is the PEM of the CA that signs the API server's kubelet
	// client certificate.
	ClientCA []byte
	// KubeletServingCA is the PEM of the CA that signs kubelet serving
	// certificates (a public certificate: nodes use it to tell a serving
	// certificate from before it, signed by the cluster CA, and replace
	// it). Empty from a server that predates it.
	KubeletServingCA []byte
	ClusterDomain    string
	// ClusterDNS is the cluster DNS Service's address(es); may be empty.
	ClusterDNS []net.IP
	// ClusterCIDR is the pod network (the server's --cluster-cidr).
	ClusterCIDR string
	// FlannelBackend is the pod network across nodes every node runs
	// (the server's --flannel-backend); empty or "none": none.
	FlannelBackend string
	// KubeProxyMode is the server's --kube-proxy-mode (auto, nftables,
	// iptables; each node resolves auto itself); empty: no kube-proxy.
	KubeProxyMode string
	// NodeLeaseDuration is the kubelets' node Lease duration
	// (LeaseDuration of the server's --node-heartbeat); 0: the kubelet's
	// default. Published in whole seconds.
	NodeLeaseDuration time.Duration
	// AllowPrivileged is the server's --allow-privileged: whether the
	// kubelets run privileged containers (a static pod's never reach the
	// API server's check). A server that published none (older than the
	// flag) refused them, as upstream's API server does by default: false.
	AllowPrivileged bool
	// LocalStoragePath is the directory on every node that holds the
	// local-path volumes (the server's --default-local-storage-path);
	// empty: the server runs no local storage (--disable=local-storage,
	// or a server older than it), and nodes run no local storage part.
	LocalStoragePath string
}

// Publish creates or updates the ConfigMap and its reader Role and binding.
func Publish(ctx context.Context, client kubernetes.Interface, c Config) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: managedBy},
		Data:       c.Data(),
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: roleName, Namespace: Namespace, Labels: managedBy},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{Name}, Verbs: []string{"get"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: roleName, Namespace: Namespace, Labels: managedBy},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: roleName},
		Subjects: []rbacv1.Subject{
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: user.NodesGroup},
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: bootstrapapi.BootstrapDefaultGroup},
		},
	}
	if err := createOrUpdate(ctx, client, cm); err != nil {
		return err
	}
	if _, err := client.RbacV1().Roles(Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("nodeconfig: role: %w", err)
	}
	if _, err := client.RbacV1().RoleBindings(Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("nodeconfig: role binding: %w", err)
	}
	return nil
}

// Data is c as the ConfigMap's data: what Publish writes and Parse reads.
func (c Config) Data() map[string]string {
	data := map[string]string{
		keyClientCA:      string(c.ClientCA),
		keyClusterDomain: c.ClusterDomain,
		keyClusterDNS:    joinIPs(c.ClusterDNS),
		keyClusterCIDR:   c.ClusterCIDR,
		keyFlannel:       c.FlannelBackend,
		keyKubeProxy:     c.KubeProxyMode,
		keyPrivileged:    strconv.FormatBool(c.AllowPrivileged),
		keyLocalStorage:  c.LocalStoragePath,
	}
	if c.NodeLeaseDuration > 0 {
		data[keyLease] = strconv.Itoa(int(c.NodeLeaseDuration / time.Second))
	}
	if len(c.KubeletServingCA) > 0 {
		data[keyKubeletCA] = string(c.KubeletServingCA)
	}
	return data
}

var managedBy = map[string]string{"app.kubernetes.io/managed-by": "edgeplane"}

func createOrUpdate(ctx context.Context, client kubernetes.Interface, cm *corev1.ConfigMap) error {
	cur, err := client.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{})
		return wrap(err)
	}
	if err != nil {
		return wrap(err)
	}
	if equalData(cur.Data, cm.Data) {
		return nil
	}
	cur.Data = cm.Data
	_, err = client.CoreV1().ConfigMaps(Namespace).Update(ctx, cur, metav1.UpdateOptions{})
	return wrap(err)
}

func wrap(err error) error {
	if err != nil {
		return fmt.Errorf("nodeconfig: %s/%s: %w", Namespace, Name, err)
	}
	return nil
}

// Fetch reads the cluster's settings for nodes.
func Fetch(ctx context.Context, client kubernetes.Interface) (Config, error) {
	cm, err := client.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
	if err != nil {
		return Config{}, wrap(err)
	}
	return Parse(cm.Data)
}

// Parse reads the cluster's settings for nodes from the ConfigMap's data
// (or a copy of it a node kept). Keys it does not know are a newer
// server's, and ignored.
func Parse(data map[string]string) (Config, error) {
	c := Config{
		ClientCA:         []byte(data[keyClientCA]),
		KubeletServingCA: []byte(data[keyKubeletCA]),
		ClusterDomain:    data[keyClusterDomain],
		ClusterCIDR:      data[keyClusterCIDR],
		FlannelBackend:   data[keyFlannel],
		KubeProxyMode:    data[keyKubeProxy],
		LocalStoragePath: data[keyLocalStorage],
	}
	if len(c.ClientCA) == 0 {
		return Config{}, errors.New("nodeconfig: the server published no client CA: upgrade the server")
	}
	if s := data[keyPrivileged]; s != "" {
		allow, err := strconv.ParseBool(s)
		if err != nil {
			return Config{}, fmt.Errorf("nodeconfig: %s/%s key %s: %q is not true or false", Namespace, Name, keyPrivileged, s)
		}
		c.AllowPrivileged = allow
	}
	if p := c.LocalStoragePath; p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
		return Config{}, fmt.Errorf("nodeconfig: %s/%s key %s: %q is not a clean absolute path", Namespace, Name, keyLocalStorage, p)
	}
	if s := data[keyLease]; s != "" {
		secs, err := strconv.Atoi(s)
		if err != nil || secs <= 0 {
			return Config{}, fmt.Errorf("nodeconfig: node lease duration %q is not a number of seconds", s)
		}
		c.NodeLeaseDuration = time.Duration(secs) * time.Second
	}
	for _, s := range strings.Split(data[keyClusterDNS], ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		ip := net.ParseIP(s)
		if ip == nil {
			return Config{}, fmt.Errorf("nodeconfig: cluster DNS %q is not an IP address", s)
		}
		c.ClusterDNS = append(c.ClusterDNS, ip)
	}
	return c, nil
}

func joinIPs(ips []net.IP) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}

func equalData(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
