package chain

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key}
}

func (ca testCA) issue(t *testing.T, cn string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: []string{"team"}},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func (ca testCA) writePEM(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestClientCertCache puts the cache in front of upstream's authenticators,
// assembled as kube-apiserver assembles them (x509 on a client CA file,
// bearer tokens, the authenticated group), and checks what it answers from
// memory and what it leaves to them.
func TestClientCertCache(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	caFile := filepath.Join(dir, "client-ca.crt")
	ca, other := newTestCA(t, "client-ca"), newTestCA(t, "other-ca")
	ca.writePEM(t, caFile)
	provider, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", caFile)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte("secret-token,token-user,uid-1,token-group\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := tokenfile.NewCSV(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	upstream := group.NewAuthenticatedGroupAdder(union.New(
		x509request.NewDynamic(provider.VerifyOptions, x509request.CommonNameUserConversion),
		bearertoken.New(tokens),
	))
	cache := newClientCertCache(upstream, provider.VerifyOptions, []string{"X-Remote-User"})

	alice := ca.issue(t, "alice", time.Now().Add(time.Hour))
	mallory := other.issue(t, "mallory", time.Now().Add(time.Hour))
	request := func(cert *x509.Certificate, headers map[string]string) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1/api", nil)
		if cert != nil {
			req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		return req
	}

	steps := []struct {
		name       string
		req        *http.Request
		wantUser   string // "" = not authenticated
		wantHits   int64
		wantMisses int64
	}{
		{"first request with a trusted certificate", request(alice, nil), "alice", 0, 1},
		{"the same certificate again is answered from memory", request(alice, nil), "alice", 1, 1},
		{"and again", request(alice, nil), "alice", 2, 1},
		{"a bearer token goes to the authenticators", request(alice, map[string]string{"Authorization": "Bearer secret-token"}), "alice", 2, 1},
		{"a token without a certificate", request(nil, map[string]string{"Authorization": "Bearer secret-token"}), "token-user", 2, 1},
		{"a front-proxy user header goes to the authenticators", request(alice, map[string]string{"X-Remote-User": "bob"}), "alice", 2, 1},
		{"an untrusted certificate is refused", request(mallory, nil), "", 2, 2},
		{"and refused again, not remembered", request(mallory, nil), "", 2, 3},
	}
	for _, s := range steps {
		resp, ok, _ := cache.AuthenticateRequest(s.req)
		got := ""
		if ok {
			got = resp.User.GetName()
			if !slices.Contains(resp.User.GetGroups(), user.AllAuthenticated) {
				t.Errorf("%s: groups %v lack %s", s.name, resp.User.GetGroups(), user.AllAuthenticated)
			}
		}
		if got != s.wantUser {
			t.Errorf("%s: authenticated as %q, want %q", s.name, got, s.wantUser)
		}
		if h, m := cache.hits.Load(), cache.misses.Load(); h != s.wantHits || m != s.wantMisses {
			t.Errorf("%s: %d hits, %d misses; want %d, %d", s.name, h, m, s.wantHits, s.wantMisses)
		}
	}

	// The client CA is replaced: alice's certificate is no longer trusted,
	// and what was remembered of it must not be used.
	other.writePEM(t, caFile)
	if err := provider.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, ok, _ := cache.AuthenticateRequest(request(alice, nil)); ok {
		t.Errorf("after the CA was replaced alice's certificate still authenticated as %q", resp.User.GetName())
	}
	if resp, ok, _ := cache.AuthenticateRequest(request(mallory, nil)); !ok || resp.User.GetName() != "mallory" {
		t.Errorf("after the CA was replaced mallory's certificate: %v, %v", resp, ok)
	}
	hits := cache.hits.Load()
	if _, ok, _ := cache.AuthenticateRequest(request(mallory, nil)); !ok || cache.hits.Load() != hits+1 {
		t.Errorf("mallory's certificate was not remembered under the new CA")
	}
}

// TestClientCertCacheExpiry checks that an answer is not used past the
// certificate's expiry, even within the cache's lifetime.
func TestClientCertCacheExpiry(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "client-ca.crt")
	ca := newTestCA(t, "client-ca")
	ca.writePEM(t, caFile)
	provider, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", caFile)
	if err != nil {
		t.Fatal(err)
	}
	upstream := x509request.NewDynamic(provider.VerifyOptions, x509request.CommonNameUserConversion)
	cache := newClientCertCache(upstream, provider.VerifyOptions, nil)
	notAfter := time.Now().Add(time.Minute).Truncate(time.Second)
	cert := ca.issue(t, "short", notAfter)
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1/api", nil)
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}

	for _, at := range []struct {
		now      time.Time
		wantHits int64
	}{
		{time.Now(), 0},                    // remembered
		{notAfter.Add(-time.Second), 1},    // answered from memory
		{notAfter.Add(time.Second), 1},     // expired: asked again
		{notAfter.Add(2 * time.Second), 1}, // and not remembered
	} {
		cache.now = func() time.Time { return at.now }
		cache.AuthenticateRequest(req)
		if got := cache.hits.Load(); got != at.wantHits {
			t.Errorf("at %v (certificate expires %v): %d hits, want %d", at.now, notAfter, got, at.wantHits)
		}
	}
}

// TestClientCertCacheCopies: a caller that changes the answer it got in
// place (a wrapper appending a group, a handler setting an extra) changes
// neither the remembered answer nor what the next request with the same
// certificate gets.
func TestClientCertCacheCopies(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "client-ca.crt")
	ca := newTestCA(t, "client-ca")
	ca.writePEM(t, caFile)
	provider, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", caFile)
	if err != nil {
		t.Fatal(err)
	}
	upstream := group.NewAuthenticatedGroupAdder(x509request.NewDynamic(provider.VerifyOptions, x509request.CommonNameUserConversion))
	cache := newClientCertCache(upstream, provider.VerifyOptions, nil)
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1/api", nil)
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{ca.issue(t, "alice", time.Now().Add(time.Hour))}}

	mutations := []struct {
		name   string
		mutate func(*authenticator.Response)
	}{
		{"overwrite a group", func(r *authenticator.Response) { r.User.GetGroups()[0] = user.SystemPrivilegedGroup }},
		{"append a group", func(r *authenticator.Response) {
			u := r.User.(*user.DefaultInfo)
			u.Groups = append(u.Groups, user.SystemPrivilegedGroup)
		}},
		{"rename the user", func(r *authenticator.Response) { r.User.(*user.DefaultInfo).Name = "admin" }},
		{"set an extra", func(r *authenticator.Response) {
			u := r.User.(*user.DefaultInfo)
			if u.Extra == nil {
				u.Extra = map[string][]string{}
			}
			u.Extra["scopes"] = []string{"everything"}
		}},
		{"set audiences", func(r *authenticator.Response) { r.Audiences = append(r.Audiences, "other") }},
		{"replace the user", func(r *authenticator.Response) { r.User = &user.DefaultInfo{Name: "root"} }},
	}
	// The first request is a miss; every later one a hit. Each mutates
	// what it got; the next must see the first answer unchanged.
	var first answerSnapshot
	for i, m := range mutations {
		resp, ok, err := cache.AuthenticateRequest(req)
		if err != nil || !ok {
			t.Fatalf("before %q: authenticate: %v, %v", m.name, ok, err)
		}
		if got := cache.hits.Load(); got != int64(i) {
			t.Fatalf("before %q: %d hits, want %d", m.name, got, i)
		}
		if i == 0 {
			first = snapshot(resp)
			if first.name != "alice" || !slices.Contains(first.groups, "team") {
				t.Fatalf("first answer is %+v, want alice in group team", first)
			}
		} else if got := snapshot(resp); !reflect.DeepEqual(got, first) {
			t.Errorf("before %q: got %+v, want the first answer %+v", m.name, got, first)
		}
		m.mutate(resp)
	}
	resp, ok, err := cache.AuthenticateRequest(req)
	if err != nil || !ok {
		t.Fatalf("after the mutations: authenticate: %v, %v", ok, err)
	}
	if got := snapshot(resp); !reflect.DeepEqual(got, first) {
		t.Errorf("after every mutation: got %+v, want the first answer %+v", got, first)
	}
}

// answerSnapshot is what an answer says, copied out of it.
type answerSnapshot struct {
	name, uid string
	groups    []string
	extra     map[string][]string
	audiences []string
}

func snapshot(r *authenticator.Response) answerSnapshot {
	s := answerSnapshot{name: r.User.GetName(), uid: r.User.GetUID(),
		groups: slices.Clone(r.User.GetGroups()), audiences: slices.Clone(r.Audiences), extra: map[string][]string{}}
	for k, v := range r.User.GetExtra() {
		s.extra[k] = slices.Clone(v)
	}
	return s
}
