package bootstrap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/cluster/ports"
	kubeschedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/pkg/certs"
)

// The API server's ComponentStatus resource (`kubectl get componentstatuses`,
// still read by dashboards and scripts) probes https://127.0.0.1:10257/healthz
// for the controller-manager and :10259 for the scheduler, as upstream
// hard-codes them (pkg/registry/core/rest/storage_core.go). Upstream's
// components serve those ports with their whole secure-serving stack; ours
// run in this process and report their health to /readyz already, so
// healthEndpoints serves only the health paths on those loopback ports from
// the same checks. It costs a listener and a goroutine each: upstream's stack
// would add, per component, a self-signed key generated at start, delegated
// authentication and authorization (TokenReview and SubjectAccessReview
// clients, the client-CA and request-header controllers) for endpoints that
// upstream lets anyone read anyway.
var healthPorts = map[string]int{
	componentControllerManager: ports.KubeControllerManagerPort,
	componentScheduler:         kubeschedulerconfig.DefaultKubeSchedulerPort,
}

// healthPaths are the paths served; upstream's always-allow paths.
var healthPaths = []string{"/healthz", "/livez", "/readyz"}

// healthEndpoints serves each started component's health on its upstream
// port on 127.0.0.1. A port another process holds (a second edgeplane, or an
// upstream component on this host) is skipped with a warning: the component
// status then shows that process's health, as it would upstream.
type healthEndpoints struct {
	host    string // "127.0.0.1"; tests use another loopback setup
	ports   map[string]int
	checks  map[string]func(*http.Request) error
	keyPair certs.KeyPair // the serving pair, read at each handshake (it is renewed)

	mu      sync.Mutex
	servers []*http.Server
	addrs   map[string]string // component -> bound address, for tests
	done    sync.WaitGroup
}

var _ component.Component = (*healthEndpoints)(nil)

func newHealthEndpoints(keyPair certs.KeyPair, checks map[string]func(*http.Request) error) *healthEndpoints {
	return &healthEndpoints{host: "127.0.0.1", ports: healthPorts, checks: checks, keyPair: keyPair}
}

func (h *healthEndpoints) Name() string { return "health-endpoints" }

// Start binds every port it can and serves them; a port it cannot bind is
// logged and left out, never an error.
func (h *healthEndpoints) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.servers != nil {
		return errors.New("health endpoints: already started")
	}
	h.servers, h.addrs = []*http.Server{}, map[string]string{}
	tlsConfig := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(h.keyPair.Cert, h.keyPair.Key)
			if err != nil {
				return nil, fmt.Errorf("health endpoints: serving cert: %w", err)
			}
			return &pair, nil
		},
	}
	for _, name := range checkedComponents {
		check, ok := h.checks[name]
		port, known := h.ports[name]
		if !ok || !known {
			continue
		}
		addr := net.JoinHostPort(h.host, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if errors.Is(err, syscall.EADDRINUSE) {
			logger.Info("Warning: another process serves this component's health port; `kubectl get componentstatuses` reports that process", "component", name, "address", addr)
			continue
		}
		if err != nil {
			// Only `kubectl get componentstatuses` needs the port: no
			// reason to refuse to start.
			logger.Info("Warning: cannot serve this component's health port; `kubectl get componentstatuses` reports it unhealthy", "component", name, "address", addr, "err", err.Error())
			continue
		}
		srv := &http.Server{
			Handler: healthHandler(check),
			// One each: ServeTLS sets up HTTP/2 on the server's config
			// in place, which two servers sharing one would race on.
			TLSConfig:         tlsConfig.Clone(),
			ReadHeaderTimeout: 5 * time.Second,
			// Failed handshakes on a loopback health port ask nothing of the user.
			ErrorLog: log.New(io.Discard, "", 0),
		}
		h.servers = append(h.servers, srv)
		h.addrs[name] = ln.Addr().String()
		h.done.Add(1)
		go func() {
			defer h.done.Done()
			if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Health endpoint stopped", "component", name, "address", addr)
			}
		}()
		logger.V(1).Info("Serving component health", "component", name, "address", addr)
	}
	return nil
}

func (h *healthEndpoints) Ready(context.Context) error { return nil }

// Stop closes the listeners and waits for the servers to return.
func (h *healthEndpoints) Stop(ctx context.Context) error {
	h.mu.Lock()
	h.closeLocked()
	h.mu.Unlock()
	done := make(chan struct{})
	go func() {
		h.done.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("health endpoints: stop: %w", ctx.Err())
	}
}

func (h *healthEndpoints) closeLocked() {
	for _, srv := range h.servers {
		_ = srv.Close()
	}
}

// healthHandler answers GET on the health paths with "ok" or, with status
// 500, the component's error, as upstream's healthz does.
func healthHandler(check func(*http.Request) error) http.Handler {
	mux := http.NewServeMux()
	for _, path := range healthPaths {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			if err := check(r); err != nil {
				http.Error(w, fmt.Sprintf("%s failed: %v", path, err), http.StatusInternalServerError)
				return
			}
			_, _ = fmt.Fprint(w, "ok")
		})
	}
	return mux
}
