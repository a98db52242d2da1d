// Package certs creates and maintains the PKI of an edgeplane server under
// <data-dir>/tls, plus the kubeconfigs of the in-process components.
//
// Ensure is idempotent: it reuses every valid file, re-issues leaf
// certificates that are missing, about to expire, no longer verify against
// their CA or no longer match the configuration (for example new --tls-san
// values), and never replaces a CA or the service-account key by itself.
// All inputs are validated and every new file is prepared in memory before
// anything is written, so a failed Ensure leaves the disk as it was.
package certs

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/klog/v2"
)

// PKI lists the absolute paths of everything Ensure maintains.
type PKI struct {
	Dir string

	// ServerCA ("cluster CA") signs the API server's serving certificate;
	// kubeconfigs, pods (kube-root-ca.crt) and cluster-info trust it.
	ServerCA KeyPair
	// KubeletServingCA signs kubelet serving certificates (the
	// kubernetes.io/kubelet-serving signer). Only the API server trusts it,
	// through KubeletServingCABundle; it is never put where clients look for
	// the API server's CA.
	KubeletServingCA KeyPair
	// KubeletServingCABundle is what the API server verifies kubelets with
	// (--kubelet-certificate-authority): KubeletServingCA, plus ServerCA
	// during the transition of a data dir from before KubeletServingCA
	// (see kubeletTrustEnd). Ensure rewrites it.
	KubeletServingCABundle string
	// KubeletServerCATrustedUntil is when the transition ends: until then
	// the bundle also holds ServerCA. Zero when it never does (a cluster
	// created with KubeletServingCA). Set by Ensure.
	KubeletServerCATrustedUntil time.Time
	// ClientCA signs client certificates, including kubelet client CSRs.
	ClientCA         KeyPair
	FrontProxyCA     KeyPair
	FrontProxyClient KeyPair
	// EtcdCA is the embedded etcd's own CA.
	EtcdCA     KeyPair
	EtcdServer KeyPair
	EtcdClient KeyPair // used by the API server

	ServiceAccountKey string // private key PEM (sa.key)
	ServiceAccountPub string // public key PEM (sa.pub)

	APIServerServing       KeyPair
	APIServerKubeletClient KeyPair
	Admin                  KeyPair
	ControllerManager      KeyPair
	Scheduler              KeyPair

	AdminKubeconfig             string
	ControllerManagerKubeconfig string
	SchedulerKubeconfig         string

	// ServingCAFingerprint is "sha256:<hex>" of the ServerCA certificate's
	// SubjectPublicKeyInfo, the kubeadm-style CA pin for join tokens.
	ServingCAFingerprint string

	// leafValidity is Ensure's, for EnsureNodeServing; zero (the default
	// lifetime) in a PKI from Layout.
	leafValidity time.Duration
}

func pair(dir, name string) KeyPair {
	return KeyPair{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
}

func newPKI(o Options) *PKI {
	d, etcd := o.Dir, filepath.Join(o.Dir, "etcd")
	return &PKI{
		Dir:                         d,
		ServerCA:                    pair(d, "server-ca"),
		KubeletServingCA:            pair(d, "kubelet-serving-ca"),
		KubeletServingCABundle:      filepath.Join(d, "kubelet-serving-ca-bundle.crt"),
		ClientCA:                    pair(d, "client-ca"),
		FrontProxyCA:                pair(d, "front-proxy-ca"),
		FrontProxyClient:            pair(d, "front-proxy-client"),
		EtcdCA:                      pair(etcd, "ca"),
		EtcdServer:                  pair(etcd, "server"),
		EtcdClient:                  pair(etcd, "client"),
		ServiceAccountKey:           filepath.Join(d, "sa.key"),
		ServiceAccountPub:           filepath.Join(d, "sa.pub"),
		APIServerServing:            pair(d, "apiserver"),
		APIServerKubeletClient:      pair(d, "apiserver-kubelet-client"),
		Admin:                       pair(d, "admin"),
		ControllerManager:           pair(d, "controller-manager"),
		Scheduler:                   pair(d, "scheduler"),
		AdminKubeconfig:             filepath.Join(o.KubeconfigDir, "admin.kubeconfig"),
		ControllerManagerKubeconfig: filepath.Join(o.KubeconfigDir, "controller-manager.kubeconfig"),
		SchedulerKubeconfig:         filepath.Join(o.KubeconfigDir, "scheduler.kubeconfig"),
	}
}

// planner accumulates the file operations of one Ensure run.
type planner struct {
	now          time.Time
	leafValidity time.Duration
	log          klog.Logger
	groups       [][]fileOp
	renewed      []string // names of the leaves (re-)issued
}

// group queues ops that belong together (for example a CA's cert and key).
func (p *planner) group(ops ...fileOp) {
	if len(ops) > 0 {
		p.groups = append(p.groups, ops)
	}
}

// tightenKeyMode queues a chmod 0600 for a key readable by group or others.
func (p *planner) tightenKeyMode(path string) {
	if m, ok := modeOf(path); ok && m&0o077 != 0 {
		p.group(fileOp{path: path, mode: keyMode, why: fmt.Sprintf("key had mode %#o", m)})
	}
}

// Ensure creates or reuses every file of the PKI and the component
// kubeconfigs and returns their paths. It is safe to call on each start.
func Ensure(ctx context.Context, o Options) (*PKI, error) {
	pki, _, err := ensure(ctx, o)
	return pki, err
}

// ensure is Ensure that also names the leaf certificates it (re-)issued.
func ensure(ctx context.Context, o Options) (*PKI, []string, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	log := klog.FromContext(ctx).WithName("certs")
	if o.Hostname != "" {
		if _, _, err := parseSAN(o.Hostname); err != nil {
			log.Info("Hostname is not a valid DNS name; leaving it out of the serving certificates", "hostname", o.Hostname)
		}
	}
	pki := newPKI(o)
	for _, d := range []string{o.Dir, filepath.Dir(pki.EtcdCA.Cert)} {
		if err := ensureDir(d, true); err != nil {
			return nil, nil, err
		}
	}
	if err := ensureDir(o.KubeconfigDir, false); err != nil {
		return nil, nil, err
	}
	if err := recoverInterrupted(log, o.Dir, filepath.Dir(pki.EtcdCA.Cert), o.KubeconfigDir); err != nil {
		return nil, nil, err
	}

	p := &planner{now: o.Now(), leafValidity: o.LeafValidity, log: log}
	var serverCA, kubeletCA, clientCA, frontProxyCA, etcdCA *caState
	if serverCA, err = p.planCA("cluster CA", "edgeplane-server-ca", pki.ServerCA); err != nil {
		return nil, nil, err
	}
	if kubeletCA, err = p.planCA("kubelet-serving CA", "edgeplane-kubelet-serving-ca", pki.KubeletServingCA); err != nil {
		return nil, nil, err
	}
	if clientCA, err = p.planCA("client CA", "edgeplane-client-ca", pki.ClientCA); err != nil {
		return nil, nil, err
	}
	if frontProxyCA, err = p.planCA("front-proxy CA", "edgeplane-front-proxy-ca", pki.FrontProxyCA); err != nil {
		return nil, nil, err
	}
	if etcdCA, err = p.planCA("etcd CA", "edgeplane-etcd-ca", pki.EtcdCA); err != nil {
		return nil, nil, err
	}
	if err := p.planServiceAccountKey(pki.ServiceAccountKey, pki.ServiceAccountPub); err != nil {
		return nil, nil, err
	}
	if pki.KubeletServerCATrustedUntil, err = p.planKubeletBundle(pki.KubeletServingCABundle, serverCA, kubeletCA, SigningDuration(o.LeafValidity)); err != nil {
		return nil, nil, err
	}

	serverAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	clientAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	masters := []string{"system:masters"}
	serving, etcdSANs := o.servingSANs(), o.etcdServerSANs()
	admin := &leafSpec{name: "admin", kp: pki.Admin, ca: clientCA, cn: "admin", orgs: masters, usages: clientAuth}
	cm := &leafSpec{name: "controller-manager", kp: pki.ControllerManager, ca: clientCA, cn: "system:kube-controller-manager", usages: clientAuth}
	sched := &leafSpec{name: "scheduler", kp: pki.Scheduler, ca: clientCA, cn: "system:kube-scheduler", usages: clientAuth}
	leaves := []*leafSpec{
		{name: "apiserver serving", kp: pki.APIServerServing, ca: serverCA, cn: "kube-apiserver",
			dns: serving.dns, ips: serving.ips, usages: serverAuth},
		{name: "apiserver kubelet client", kp: pki.APIServerKubeletClient, ca: clientCA,
			cn: "kube-apiserver-kubelet-client", orgs: masters, usages: clientAuth},
		{name: "front-proxy client", kp: pki.FrontProxyClient, ca: frontProxyCA, cn: "front-proxy-client", usages: clientAuth},
		// etcd's gRPC gateway dials etcd with the server certificate, so it
		// also needs client auth.
		{name: "etcd server", kp: pki.EtcdServer, ca: etcdCA, cn: "etcd-server",
			dns: etcdSANs.dns, ips: etcdSANs.ips, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{name: "etcd client", kp: pki.EtcdClient, ca: etcdCA, cn: "etcd-client", usages: clientAuth},
		admin, cm, sched,
	}
	states := map[*leafSpec]*leafState{}
	for _, l := range leaves {
		if states[l], err = p.planLeaf(l); err != nil {
			return nil, nil, err
		}
	}

	host := "127.0.0.1"
	if o.APIServerHost != nil {
		host = o.APIServerHost.String()
	}
	server := "https://" + net.JoinHostPort(host, strconv.Itoa(o.APIServerPort))
	for _, k := range []struct {
		path string
		spec *leafSpec
		mode os.FileMode
	}{
		{pki.AdminKubeconfig, admin, o.AdminKubeconfigMode},
		{pki.ControllerManagerKubeconfig, cm, keyMode},
		{pki.SchedulerKubeconfig, sched, keyMode},
	} {
		var data []byte
		if k.spec == admin {
			// Users copy the admin kubeconfig elsewhere: self-contained.
			st := states[k.spec]
			data, err = renderKubeconfig(server, serverCA.certPEM, st.certPEM, st.keyPEM, k.spec.cn)
		} else {
			data, err = renderFileKubeconfig(server, pki.ServerCA.Cert, k.spec.kp.Cert, k.spec.kp.Key, k.spec.cn)
		}
		if err != nil {
			return nil, nil, err
		}
		ops, err := kubeconfigOps(k.path, data, k.mode)
		if err != nil {
			return nil, nil, err
		}
		p.group(ops...)
	}

	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	for _, g := range p.groups {
		if err := applyGroup(g); err != nil {
			return nil, nil, err
		}
		for _, op := range g {
			log.V(2).Info("Updated file", "path", op.path, "reason", op.why)
		}
	}
	sum := sha256.Sum256(serverCA.cert.RawSubjectPublicKeyInfo)
	pki.ServingCAFingerprint = "sha256:" + hex.EncodeToString(sum[:])
	pki.leafValidity = o.LeafValidity
	return pki, p.renewed, nil
}
