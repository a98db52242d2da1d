package kubeadmcompat

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeadmv1beta4 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Names and keys kubeadm v1.37 uses (cmd/kubeadm/app/constants).
const (
	KubeadmConfigName = "kubeadm-config"
	KubeletConfigName = "kubelet-config"
	clusterConfigKey  = "ClusterConfiguration"
	kubeletConfigKey  = "kubelet"
	// componentConfigHash marks a component config kubeadm generated (as
	// opposed to one a user supplied): sha256 of the data values in key order.
	componentConfigHash = "kubeadm.kubernetes.io/component-config.hash"

	// kubeadm's defaults for the files on a node.
	kubeadmCertificatesDir = "/etc/kubernetes/pki"
	kubeadmManifestsDir    = "/etc/kubernetes/manifests"
	kubeletHealthzPort     = 10248
)

// kubeadmConfigMap is kube-system/kubeadm-config: the ClusterConfiguration
// `kubeadm join` reads.
func kubeadmConfigMap(c Config) (*corev1.ConfigMap, error) {
	u, _ := url.Parse(c.ServerURL) // checked by Validate
	cc := kubeadmv1beta4.ClusterConfiguration{
		TypeMeta:             metav1.TypeMeta{APIVersion: kubeadmv1beta4.SchemeGroupVersion.String(), Kind: "ClusterConfiguration"},
		KubernetesVersion:    c.KubernetesVersion,
		ControlPlaneEndpoint: u.Host,
		Networking: kubeadmv1beta4.Networking{
			ServiceSubnet: c.ServiceCIDR,
			PodSubnet:     c.PodCIDR,
			DNSDomain:     c.ClusterDomain,
		},
		CertificatesDir: kubeadmCertificatesDir,
		ImageRepository: kubeadmv1beta4.DefaultImageRepository,
		ClusterName:     kubeadmv1beta4.DefaultClusterName,
	}
	b, err := yaml.Marshal(&cc)
	if err != nil {
		return nil, fmt.Errorf("kubeadmcompat: ClusterConfiguration: %w", err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: KubeadmConfigName, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{clusterConfigKey: string(b)},
	}, nil
}

// kubeletConfigMap is kube-system/kubelet-config: the KubeletConfiguration
// `kubeadm join` writes to /var/lib/kubelet/config.yaml, with kubeadm's
// defaults (webhook authentication and authorization, no anonymous access,
// the cluster CA as client CA, certificate rotation, the systemd cgroup
// driver, static pods in /etc/kubernetes/manifests) and the cluster's DNS.
func kubeletConfigMap(c Config) (*corev1.ConfigMap, error) {
	kc := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"},
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: kubeadmCertificatesDir + "/ca.crt"},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:      kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		CgroupDriver:       "systemd",
		ClusterDomain:      c.ClusterDomain,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To[int32](kubeletHealthzPort),
		RotateCertificates: true,
		StaticPodPath:      kubeadmManifestsDir,
	}
	for _, ip := range c.ClusterDNS {
		kc.ClusterDNS = append(kc.ClusterDNS, ip.String())
	}
	if c.NodeLeaseDuration > 0 {
		kc.NodeLeaseDurationSeconds = int32(c.NodeLeaseDuration / time.Second)
	}
	b, err := yaml.Marshal(&kc)
	if err != nil {
		return nil, fmt.Errorf("kubeadmcompat: KubeletConfiguration: %w", err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: KubeletConfigName, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{kubeletConfigKey: string(b)},
	}
	cm.Annotations = map[string]string{componentConfigHash: checksum(cm.Data)}
	return cm, nil
}

// checksum is kubeadm's component config checksum of a ConfigMap's data:
// the SHA-256 of the values in key order.
func checksum(data map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		h.Write([]byte(data[k]))
	}
	return fmt.Sprintf("sha256:%x", h.Sum(nil))
}

// applyConfigMap creates want or sets its keys and annotations on the
// existing ConfigMap, leaving other keys alone (the bootstrap signer's
// signatures in cluster-info). Nothing is written when nothing changes.
func applyConfigMap(ctx context.Context, client kubernetes.Interface, want *corev1.ConfigMap) error {
	cms := client.CoreV1().ConfigMaps(want.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cms.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, want, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), want.Name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		changed := false
		if cur.Data == nil {
			cur.Data = map[string]string{}
		}
		for k, v := range want.Data {
			if cur.Data[k] != v {
				cur.Data[k], changed = v, true
			}
		}
		for k, v := range want.Annotations {
			if cur.Annotations[k] != v {
				if cur.Annotations == nil {
					cur.Annotations = map[string]string{}
				}
				cur.Annotations[k], changed = v, true
			}
		}
		if !changed {
			return nil
		}
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("kubeadmcompat: ConfigMap %s/%s: %w", want.Namespace, want.Name, err)
	}
	return nil
}
