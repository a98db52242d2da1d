package resourcemetrics

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The kubelets of these tests: TLS servers on loopback that answer
// /metrics/resource in the kubelet's text format, with figures that grow at
// a known rate, and that ask for a client certificate from the cluster's
// client CA as a kubelet does. What a kubelet computes is not under test
// here (the e2e tests read real kubelets); what the scraper trusts, sends
// and makes of the answers is.

// fakeContainer is a container whose CPU grows at cores.
type fakeContainer struct {
	namespace, pod, name string
	cores                float64
	mem                  uint64
}

// fakeKubelet is one node's kubelet.
type fakeKubelet struct {
	srv        *httptest.Server
	start      time.Time
	nodeCores  float64
	nodeMem    uint64
	containers []fakeContainer

	mu         sync.Mutex
	requests   int
	clients    []string // the client certificates' common names
	handshakes []string // TLS handshake errors, as the server logged them
}

// startFakeKubelet serves with the certificate and key in certFile and
// keyFile, asking for a client certificate of clientCAFile.
func startFakeKubelet(t *testing.T, certFile, keyFile, clientCAFile string, k *fakeKubelet) *fakeKubelet {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(clientCAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no CA in %s", clientCAFile)
	}
	k.start = time.Now()
	k.srv = httptest.NewUnstartedServer(http.HandlerFunc(k.serve))
	k.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	k.srv.Config.ErrorLog = log.New(handshakeLog{k}, "", 0)
	k.srv.StartTLS()
	t.Cleanup(k.srv.Close)
	return k
}

type handshakeLog struct{ k *fakeKubelet }

func (l handshakeLog) Write(p []byte) (int, error) {
	l.k.mu.Lock()
	defer l.k.mu.Unlock()
	l.k.handshakes = append(l.k.handshakes, strings.TrimSpace(string(p)))
	return len(p), nil
}

func (k *fakeKubelet) port() int32 { return int32(k.srv.Listener.Addr().(*net.TCPAddr).Port) }

func (k *fakeKubelet) serve(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.requests++
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		k.clients = append(k.clients, r.TLS.PeerCertificates[0].Subject.CommonName)
	}
	k.mu.Unlock()
	if r.URL.Path != "/metrics/resource" {
		http.NotFound(w, r)
		return
	}
	now := time.Now()
	ms := now.UnixMilli()
	elapsed := float64(ms-k.start.UnixMilli()) / 1000
	var b strings.Builder
	fmt.Fprintf(&b, "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total %g %d\n", 100+k.nodeCores*elapsed, ms)
	fmt.Fprintf(&b, "node_memory_working_set_bytes %d %d\n", k.nodeMem, ms)
	for _, c := range k.containers {
		l := fmt.Sprintf(`{container=%q,namespace=%q,pod=%q}`, c.name, c.namespace, c.pod)
		fmt.Fprintf(&b, "container_cpu_usage_seconds_total%s %g %d\n", l, 1+c.cores*elapsed, ms)
		fmt.Fprintf(&b, "container_memory_working_set_bytes%s %d %d\n", l, c.mem, ms)
		fmt.Fprintf(&b, "container_start_time_seconds%s %g\n", l, float64(k.start.Add(-time.Hour).UnixNano())/1e9)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}

// seen is how many requests the kubelet answered, the client certificates'
// names, and its handshake errors.
func (k *fakeKubelet) seen() (int, []string, []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.requests, append([]string(nil), k.clients...), append([]string(nil), k.handshakes...)
}

// signedBy writes a serving certificate for 127.0.0.1, signed by the CA in
// caCert and caKey, into dir; it returns its files.
func signedBy(t *testing.T, caCert, caKey, dir, name string) (string, string) {
	t.Helper()
	ca, err := tls.LoadX509KeyPair(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caX509, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caX509, key.Public(), ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := dir+"/"+name+".crt", dir+"/"+name+".key"
	writePEM(t, certFile, "CERTIFICATE", der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
