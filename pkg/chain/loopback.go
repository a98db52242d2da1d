package chain

import (
	"net/http"
	"time"

	"github.com/google/uuid"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/healthz"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// loopbackCertAge is upstream's validity of the loopback certificate
// (k8s.io/apiserver v0.37.2, options.maxAge).
const loopbackCertAge = (3*365 + 1) * 24 * time.Hour

// applyLoopbackServing is upstream's SecureServingOptionsWithLoopback
// ApplyToConfig (k8s.io/apiserver v0.37.2) with one change: the in-memory
// certificate that the API server's own loopback clients trust is a
// self-signed ECDSA P-256 one (certs.SelfSigned), where upstream mints a CA
// and a certificate on two RSA-2048 keys at every start. Same server name,
// same validity, same SNI precedence, same loopback-serving-certificate
// health and liveness check.
func applyLoopbackServing(s *genericoptions.SecureServingOptionsWithLoopback, cfg *genericapiserver.Config) error {
	if s == nil || s.SecureServingOptions == nil {
		return nil
	}
	if err := s.SecureServingOptions.ApplyTo(&cfg.SecureServing); err != nil {
		return err
	}
	if cfg.SecureServing == nil {
		return nil
	}
	now := time.Now()
	certPEM, keyPEM, err := certs.SelfSigned(genericapiserver.LoopbackClientServerNameOverride, now, loopbackCertAge)
	if err != nil {
		return err
	}
	provider, err := dynamiccertificates.NewStaticSNICertKeyContent("self-signed loopback", certPEM, keyPEM, genericapiserver.LoopbackClientServerNameOverride)
	if err != nil {
		return err
	}
	// First, so that it wins over any other certificate for the same name.
	cfg.SecureServing.SNICerts = append([]dynamiccertificates.SNICertKeyContentProvider{provider}, cfg.SecureServing.SNICerts...)
	loopback, err := cfg.SecureServing.NewLoopbackClientConfig(uuid.New().String(), certPEM)
	if err != nil {
		// Upstream keeps a loopback config set before it; edgeplane's
		// generic config has none, so this is upstream's failing case.
		cfg.SecureServing.SNICerts = cfg.SecureServing.SNICerts[1:]
		return err
	}
	cfg.LoopbackClientConfig = loopback
	expires := now.Add(loopbackCertAge)
	check := healthz.NamedCheck("loopback-serving-certificate", func(*http.Request) error {
		if time.Now().After(expires) {
			return genericoptions.LoopbackCertificateExpiredError{}
		}
		return nil
	})
	cfg.AddHealthzChecks(check)
	cfg.AddLivezChecks(check)
	return nil
}
