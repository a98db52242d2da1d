package certs

import (
	"bytes"
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const kubeconfigCluster = "edgeplane"

// renderKubeconfig returns a kubeconfig with embedded CA, client certificate
// and key data, using the single cluster/context "edgeplane".
func renderKubeconfig(server string, caPEM, certPEM, keyPEM []byte, user string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeconfigCluster] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: caPEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: certPEM,
		ClientKeyData:         keyPEM,
	}
	cfg.Contexts[kubeconfigCluster] = &clientcmdapi.Context{
		Cluster:  kubeconfigCluster,
		AuthInfo: user,
	}
	cfg.CurrentContext = kubeconfigCluster
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("tls: cannot encode kubeconfig for %s: %w", user, err)
	}
	return b, nil
}

// renderFileKubeconfig returns a kubeconfig that points at the CA,
// certificate and key files instead of embedding them. client-go reloads
// client certificates given as files (it re-reads them on new connections and
// checks every few minutes, closing connections when they changed), so the
// in-process components pick up renewed certificates without a restart.
func renderFileKubeconfig(server, caFile, certFile, keyFile, user string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeconfigCluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts[kubeconfigCluster] = &clientcmdapi.Context{Cluster: kubeconfigCluster, AuthInfo: user}
	cfg.CurrentContext = kubeconfigCluster
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("tls: cannot encode kubeconfig for %s: %w", user, err)
	}
	return b, nil
}

// kubeconfigOps returns the operations that make path hold data with mode:
// none when it already does, a chmod when only the mode differs, otherwise
// an atomic write. A file that exists but cannot be read is an error.
func kubeconfigOps(path string, data []byte, mode os.FileMode) ([]fileOp, error) {
	cur, err := readOptional(path)
	if err != nil {
		return nil, err
	}
	if cur != nil && bytes.Equal(cur, data) {
		if m, ok := modeOf(path); ok && m != mode {
			return []fileOp{{path: path, mode: mode, why: "kubeconfig mode"}}, nil
		}
		return nil, nil
	}
	why := "kubeconfig changed"
	if cur == nil {
		why = "kubeconfig missing"
	}
	return []fileOp{{path: path, data: data, mode: mode, why: why, created: cur == nil}}, nil
}

// WriteKubeconfig writes a kubeconfig at path for user that talks to server,
// trusting the CA in caFile and authenticating with the client certificate
// and key in certFile and keyFile, all embedded in the file. The write is
// atomic, and skipped when the file already has this content (its mode is
// still set to mode).
func WriteKubeconfig(path, server, caFile, certFile, keyFile, user string, mode os.FileMode) error {
	var data [3][]byte
	for i, f := range []string{caFile, certFile, keyFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("tls: cannot read %s: %v", f, causeOf(err))
		}
		data[i] = b
	}
	if _, err := parseCertPEM(caFile, data[0]); err != nil {
		return err
	}
	if _, _, err := LoadKeyPair(KeyPair{Cert: certFile, Key: keyFile}); err != nil {
		return err
	}
	b, err := renderKubeconfig(server, data[0], data[1], data[2], user)
	if err != nil {
		return err
	}
	ops, err := kubeconfigOps(path, b, mode)
	if err != nil {
		return err
	}
	return applyGroup(ops)
}
