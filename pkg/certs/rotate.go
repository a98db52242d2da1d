package certs

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// RotateOptions configures Rotate.
type RotateOptions struct {
	// Names are the leaf certificates to re-issue (see PKI.LeafNames); all
	// leaves when empty.
	Names []string
	// Now returns the current time; defaults to time.Now.
	Now func() time.Time
	// LeafValidity of the new certificates; one year when zero.
	LeafValidity time.Duration
}

// Rotate re-issues leaf certificates of p now, whatever their remaining
// lifetime, and returns the names it re-issued. Each new certificate copies
// the subject, names and usages of the one it replaces and keeps its key, so
// only the certificate file changes (atomically), and a running server picks
// it up through its file reloading. The admin kubeconfig, which embeds its
// certificate, is rewritten when "admin" is rotated. It needs none of the
// server's flags, so it works on a stopped or a running server.
func Rotate(ctx context.Context, p *PKI, o RotateOptions) ([]string, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LeafValidity == 0 {
		o.LeafValidity = leafValidity
	}
	now := o.Now()
	if err := checkMintClock(now, "certificates"); err != nil {
		return nil, err
	}
	all := p.LeafNames()
	for _, n := range o.Names {
		if !slices.Contains(all, n) {
			return nil, fmt.Errorf("tls: no certificate named %q; leaf certificates are: %s", n, strings.Join(all, ", "))
		}
	}
	log := klog.FromContext(ctx).WithName("certs")
	var done []string
	for _, e := range p.Entries() {
		if e.CA == nil || (len(o.Names) > 0 && !slices.Contains(o.Names, e.Name)) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return done, err
		}
		if err := reissue(e, now, o.LeafValidity); err != nil {
			return done, err
		}
		log.Info("Re-issued certificate", "name", e.Name, "cert", e.Pair.Cert)
		done = append(done, e.Name)
		if e.Name == "admin" {
			if err := refreshEmbeddedKubeconfig(p.AdminKubeconfig, e.Pair); err != nil {
				return done, err
			}
		}
	}
	return done, nil
}

// reissue signs a copy of the certificate of e with a fresh validity.
func reissue(e Entry, now time.Time, validity time.Duration) error {
	caCert, caKey, err := LoadKeyPair(*e.CA)
	if err != nil {
		return err
	}
	old, key, err := LoadKeyPair(e.Pair)
	if err != nil {
		return err
	}
	spec := &leafSpec{
		name:   e.Name,
		kp:     e.Pair,
		ca:     &caState{name: e.Name + " CA", kp: *e.CA, cert: caCert, key: caKey},
		cn:     old.Subject.CommonName,
		orgs:   old.Subject.Organization,
		dns:    old.DNSNames,
		ips:    old.IPAddresses,
		usages: old.ExtKeyUsage,
	}
	if !now.Before(caCert.NotAfter) {
		return fmt.Errorf("tls: the CA %s of %s has expired: a new CA is needed first", e.CA.Cert, e.Name)
	}
	if now.Before(caCert.NotBefore) {
		// A certificate minted now would not verify until the clock passes
		// the CA's NotBefore.
		return fmt.Errorf("tls: system clock reads %s, before the NotBefore %s of the CA %s of %s: %s",
			now.UTC().Format(timeFormat), caCert.NotBefore.UTC().Format(timeFormat), e.CA.Cert, e.Name, clockFloorMsg)
	}
	_, certPEM, err := mintLeaf(spec, key.Public(), now, validity)
	if err != nil {
		return err
	}
	return writeAtomic(e.Pair.Cert, certPEM, certMode)
}

// refreshEmbeddedKubeconfig puts the current certificate and key of kp into
// every user of the kubeconfig at path that embeds client certificate data.
func refreshEmbeddedKubeconfig(path string, kp KeyPair) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return fmt.Errorf("tls: cannot load %s: %w", path, err)
	}
	certPEM, err := os.ReadFile(kp.Cert)
	if err != nil {
		return fmt.Errorf("tls: cannot read %s: %v", kp.Cert, causeOf(err))
	}
	keyPEM, err := os.ReadFile(kp.Key)
	if err != nil {
		return fmt.Errorf("tls: cannot read %s: %v", kp.Key, causeOf(err))
	}
	for _, u := range cfg.AuthInfos {
		if len(u.ClientCertificateData) > 0 {
			u.ClientCertificateData, u.ClientKeyData = certPEM, keyPEM
		}
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("tls: cannot encode %s: %w", path, err)
	}
	mode, ok := modeOf(path)
	if !ok {
		mode = defaultAdminMode
	}
	return writeAtomic(path, data, mode)
}
