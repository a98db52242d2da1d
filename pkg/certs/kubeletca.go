package certs

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"time"
)

// Kubelet serving certificates are signed by a CA of their own,
// KubeletServingCA, that only the API server trusts, and only for its
// connections to kubelets. Were they signed by the server CA, which
// kubeconfigs and every pod (kube-root-ca.crt) trust for the API server, a
// node that got a serving certificate naming kubernetes.default.svc would be
// trusted as the API server.
//
// A data dir from before KubeletServingCA has kubelets whose serving
// certificates the server CA signed. The API server keeps trusting the
// server CA for kubelets (the bundle holds both) until the last of those
// certificates can no longer be valid: see kubeletTrustEnd.

// SigningDuration is the lifetime of the certificates the controller-manager
// signs for CSRs (its ClusterSigningDuration), kubelet serving certificates
// among them: upstream's default of one year, or testLifetime when it is set
// (the test knob LeafLifetimeEnv, Options.LeafValidity). The kubelet-serving
// transition lasts as long.
func SigningDuration(testLifetime time.Duration) time.Duration {
	if testLifetime > 0 {
		return testLifetime
	}
	return leafValidity
}

// kubeletTrustEnd is when the API server stops trusting the server CA for
// kubelets; zero when it never does. Only a server CA older than the
// kubelet-serving CA can have signed kubelet serving certificates (a cluster
// created with both has them from the same moment; a server CA replaced since
// signed none). The last of those was signed at the latest when the
// kubelet-serving CA was created, clockSkew after its NotBefore, and lives
// at most one signing duration.
func kubeletTrustEnd(serverCA, kubeletCA *x509.Certificate, signing time.Duration) time.Time {
	if !serverCA.NotBefore.Before(kubeletCA.NotBefore) {
		return time.Time{}
	}
	return kubeletCA.NotBefore.Add(clockSkew + signing)
}

// planKubeletBundle plans the file the API server verifies kubelets with:
// the kubelet-serving CA, and the server CA until the transition ends. It
// returns that end (zero: none).
func (p *planner) planKubeletBundle(path string, serverCA, kubeletCA *caState, signing time.Duration) (time.Time, error) {
	end := kubeletTrustEnd(serverCA.cert, kubeletCA.cert, signing)
	want := bytes.Clone(kubeletCA.certPEM)
	transition := p.now.Before(end)
	if transition {
		want = append(want, serverCA.certPEM...)
	}
	have, err := readOptional(path)
	if err != nil {
		return end, err
	}
	if bytes.Equal(have, want) {
		return end, nil
	}
	why := "kubelet-serving CA bundle: the kubelet-serving CA"
	switch {
	case transition:
		why += " and, until " + end.UTC().Format(timeFormat) + ", the cluster CA"
	case !end.IsZero():
		p.log.Info("The transition to the kubelet-serving CA is over (every kubelet serving certificate the cluster CA signed has expired): the bundle holds the kubelet-serving CA only, and the API server verifies kubelets with it from its next start",
			"since", end.UTC(), "bundle", path)
	}
	p.group(fileOp{path: path, data: want, mode: certMode, why: why, created: have == nil})
	return end, nil
}

// ReplaceKubeletServingCA puts certPEM and keyPEM, the kubelet-serving CA
// the other servers of the cluster use, in place of this data dir's, which
// Ensure created at this start and nothing has used yet. The write is
// journaled as a new CA's is: a crash in the middle leaves no CA, which the
// next Ensure creates again, and the next start replaces again. Run Ensure
// after it for the bundle.
func ReplaceKubeletServingCA(p *PKI, certPEM, keyPEM []byte) error {
	kp := p.KubeletServingCA
	cert, err := parseCertPEM(kp.Cert, certPEM)
	if err != nil {
		return err
	}
	key, err := parseKeyPEM(kp.Key, keyPEM)
	if err != nil {
		return err
	}
	if err := checkMatch(kp, cert, key); err != nil {
		return err
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("tls: the cluster's kubelet-serving CA %s is not a CA certificate", cert.Subject)
	}
	why := "the cluster's kubelet-serving CA"
	return applyGroup([]fileOp{
		{path: kp.Key, data: keyPEM, mode: keyMode, why: why, created: true},
		{path: kp.Cert, data: certPEM, mode: certMode, why: why, created: true},
	})
}
