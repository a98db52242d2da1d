package join

import (
	"crypto/hkdf"
	"crypto/sha256"
)

const (
	// SecretName is the kube-system Secret that holds the sealed bootstrap
	// data and the etcd client URLs for servers joining with --server.
	SecretName = "edgeplane-bootstrap"
	// ServersGroup is the group of the bootstrap token joining servers use.
	ServersGroup = "system:bootstrappers:edgeplane:servers"

	keySealed        = "sealed"
	keyEtcdEndpoints = "etcd-endpoints"
	tokenAlphabet    = "abcdefghijklmnopqrstuvwxyz0123456789"
)

// BootstrapToken derives, from the join token's secret, the Kubernetes
// bootstrap token ("<6>.<16>") a joining server authenticates with. It is a
// one-way derivation: who sees it learns neither the secret nor the key of
// the sealed data.
func BootstrapToken(secret string) (id, tokenSecret string) {
	b, err := hkdf.Key(sha256.New, []byte(secret), nil, "edgeplane bootstrap token v1", 22)
	if err != nil {
		panic(err) // only for lengths hkdf refuses
	}
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = tokenAlphabet[int(c)%len(tokenAlphabet)]
	}
	return string(out[:6]), string(out[6:])
}
