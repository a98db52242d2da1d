package certs

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"
)

// Files of a node serving certificate minted by EnsureNodeServing, in the
// node's certificate directory.
const (
	nodeServingCertName = "kubelet-serving.crt"
	nodeServingKeyName  = "kubelet-serving.key"
)

// EnsureNodeServing gives the kubelet of a server that is its own node a
// serving certificate from the kubelet-serving CA, minted here instead of
// through a CSR: for system:node:<node> in system:nodes, naming dns and ips,
// in <certDir>/kubelet-serving.crt and .key (the kubelet's tlsCertFile and
// tlsPrivateKeyFile). A certificate that verifies against the
// kubelet-serving CA, has the same subject and names and more than a third
// of its life left is kept. Otherwise a new one is issued on the existing
// key: only the certificate file changes (atomically), so a running kubelet,
// which re-reads both files when they change (ReloadKubeletServerCertificateFile),
// never loads a certificate with another key. Calling it periodically, as
// often as the Renewer checks, renews it.
func EnsureNodeServing(ctx context.Context, pki *PKI, node string, dns []string, ips []net.IP, certDir string) (certFile, keyFile string, err error) {
	return ensureNodeServing(ctx, pki, node, dns, ips, certDir, time.Now())
}

func ensureNodeServing(ctx context.Context, pki *PKI, node string, dns []string, ips []net.IP, certDir string, now time.Time) (certFile, keyFile string, err error) {
	logger := klog.FromContext(ctx)
	if node == "" {
		return "", "", errors.New("tls: node serving certificate: no node name given")
	}
	var sans sanSet
	for _, d := range dns {
		ip, name, err := parseSAN(d)
		if err != nil || ip != nil || name == "" {
			return "", "", fmt.Errorf("tls: node serving certificate of %s: %q is not a DNS name", node, d)
		}
		sans.addDNS(name)
	}
	for _, ip := range ips {
		if ip == nil {
			return "", "", fmt.Errorf("tls: node serving certificate of %s: an empty IP address", node)
		}
		sans.addIP(ip)
	}
	if len(sans.dns)+len(sans.ips) == 0 {
		return "", "", fmt.Errorf("tls: node serving certificate of %s: no DNS name or IP address to name", node)
	}
	validity := pki.leafValidity
	if validity == 0 {
		validity = leafValidity
	}
	if err := ensureDir(certDir, true); err != nil {
		return "", "", err
	}
	kp := KeyPair{Cert: filepath.Join(certDir, nodeServingCertName), Key: filepath.Join(certDir, nodeServingKeyName)}
	caCert, caKey, err := LoadKeyPair(pki.KubeletServingCA)
	if err != nil {
		return "", "", err
	}
	spec := &leafSpec{
		name: "node serving", kp: kp, cn: "system:node:" + node, orgs: []string{"system:nodes"},
		ca:     &caState{name: "kubelet-serving CA", kp: pki.KubeletServingCA, cert: caCert, key: caKey},
		dns:    sans.dns,
		ips:    sans.ips,
		usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	cert, key, reason := loadNodeServing(kp)
	p := &planner{now: now, log: logger}
	if reason == "" {
		reason = p.reissueReason(spec, cert, key)
	}
	if reason == "" {
		if m, ok := modeOf(kp.Key); ok && m&0o077 != 0 {
			if err := os.Chmod(kp.Key, keyMode); err != nil {
				return "", "", fmt.Errorf("tls: cannot set mode %#o on %s: %v", keyMode, kp.Key, causeOf(err))
			}
		}
		logger.V(1).Info("Reusing the node's serving certificate", "node", node, "notAfter", cert.NotAfter)
		return kp.Cert, kp.Key, nil
	}
	if err := checkMintClock(now, "the node's serving certificate"); err != nil {
		return "", "", err
	}
	if now.Before(caCert.NotBefore) || !now.Before(caCert.NotAfter) {
		return "", "", fmt.Errorf("tls: system clock reads %s, outside the validity (%s to %s) of the kubelet-serving CA %s: fix the clock, or replace the CA if it expired",
			now.UTC().Format(timeFormat), caCert.NotBefore.UTC().Format(timeFormat), caCert.NotAfter.UTC().Format(timeFormat), pki.KubeletServingCA.Cert)
	}
	if key == nil {
		var keyPEM []byte
		if key, keyPEM, err = newKey(); err != nil {
			return "", "", err
		}
		// The key first: a crash before the certificate is written leaves a
		// certificate that does not match it, which the next call replaces.
		if err := writeAtomic(kp.Key, keyPEM, keyMode); err != nil {
			return "", "", err
		}
	}
	issued, certPEM, err := mintLeaf(spec, key.Public(), now, validity)
	if err != nil {
		return "", "", err
	}
	if err := writeAtomic(kp.Cert, certPEM, certMode); err != nil {
		return "", "", err
	}
	logger.Info("Issued the node's serving certificate", "node", node, "reason", reason, "notAfter", issued.NotAfter)
	return kp.Cert, kp.Key, nil
}

// loadNodeServing reads a node serving pair. A file that is missing or
// cannot be used yields nil for it and why, for the caller to issue anew
// (these files are this package's own, and the kubelet could not use them
// either); a key that does not match the certificate is kept, and the
// certificate replaced.
func loadNodeServing(kp KeyPair) (*x509.Certificate, crypto.Signer, string) {
	var cert *x509.Certificate
	var key crypto.Signer
	var reasons []string
	if b, err := readOptional(kp.Key); err != nil || b == nil {
		reasons = append(reasons, "key missing or unreadable")
	} else if key, err = parseKeyPEM(kp.Key, b); err != nil {
		reasons = append(reasons, "key unusable")
	}
	if b, err := readOptional(kp.Cert); err != nil || b == nil {
		reasons = append(reasons, "certificate missing or unreadable")
	} else if cert, err = parseCertPEM(kp.Cert, b); err != nil {
		reasons = append(reasons, "certificate unusable")
	}
	if cert != nil && key != nil && !samePublicKey(cert.PublicKey, key.Public()) {
		reasons = append(reasons, "certificate does not match the key")
	}
	if len(reasons) == 0 {
		return cert, key, ""
	}
	return nil, key, fmt.Sprint(reasons)
}

// kubeletServerCurrent is the kubelet's store of the serving certificates
// it gets by CSR (serverTLSBootstrap): a link to the current certificate and
// key in one PEM file.
const kubeletServerCurrent = "kubelet-server-current.pem"

// DropForeignKubeletServing removes the serving certificate that a kubelet
// got by CSR and keeps in certDir when no CA in caPEM signed it. Called
// before the kubelet starts, with the kubelet-serving CA, it ends a node's
// part of the transition from the server CA at once: the kubelet asks for a
// new certificate at start instead of serving the old one until it is due
// for rotation, months later. It reports whether it removed one.
func DropForeignKubeletServing(ctx context.Context, certDir string, caPEM []byte) (bool, error) {
	cas, err := parseCerts(caPEM)
	if err != nil {
		return false, fmt.Errorf("tls: kubelet-serving CA: %w", err)
	}
	current := filepath.Join(certDir, kubeletServerCurrent)
	b, err := readOptional(current)
	if err != nil || b == nil {
		return false, err
	}
	cert, err := parseCertPEM(current, b)
	if err != nil {
		return false, err
	}
	for _, ca := range cas {
		if cert.CheckSignatureFrom(ca) == nil {
			return false, nil
		}
	}
	target, err := filepath.EvalSymlinks(current)
	if err != nil {
		return false, fmt.Errorf("tls: cannot resolve %s: %v", current, causeOf(err))
	}
	dir, err := filepath.EvalSymlinks(certDir)
	if err != nil {
		return false, fmt.Errorf("tls: cannot resolve %s: %v", certDir, causeOf(err))
	}
	if err := os.Remove(current); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("tls: cannot remove %s: %v", current, causeOf(err))
	}
	// The file it pointed to, when it is the kubelet's own.
	if target != current && filepath.Dir(target) == dir {
		if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("tls: cannot remove %s: %v", target, causeOf(err))
		}
	}
	if err := syncDir(certDir); err != nil {
		return false, err
	}
	klog.FromContext(ctx).Info("Removed the kubelet's serving certificate from another CA; the kubelet asks for a new one",
		"cert", target, "issuer", cert.Issuer.String(), "notAfter", cert.NotAfter)
	return true, nil
}

// parseCerts parses every CERTIFICATE block of data; at least one.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}
