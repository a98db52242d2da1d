package ingress

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"k8s.io/klog/v2"
)

// Listener timing and bounds.
const (
	// readHeaderTimeout bounds a client's request headers (slow clients
	// hold a connection that long at most before their first request).
	readHeaderTimeout = 30 * time.Second
	// idleTimeout closes kept-alive connections idle that long.
	idleTimeout = 3 * time.Minute
	// maxConnections is the most open connections per listener: each costs
	// memory (buffers, a goroutine, TLS state); more wait in the kernel's
	// backlog.
	maxConnections = 1024
	// bindRetryMin and bindRetryMax bound the wait between tries to take a
	// port that another program holds.
	bindRetryMin = 5 * time.Second
	bindRetryMax = time.Minute
)

// listener serves the proxy on one address, taking the port when it can.
type listener struct {
	name   string // "http", "https"
	addr   string // host:port to listen at
	srv    *http.Server
	tls    bool
	onBind func(port int32) // called once bound

	mu    sync.Mutex
	bound net.Listener
}

func newListener(name, addr string, p *Proxy, logger klog.Logger, onBind func(int32)) *listener {
	l := &listener{name: name, addr: addr, onBind: onBind, tls: name == "https"}
	l.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		// TLS handshake errors of scanners and the like: not worth a line
		// at the default verbosity.
		ErrorLog: log.New(klogWriter{logger.V(2)}, "", 0),
	}
	if l.tls {
		l.srv.TLSConfig = p.TLSConfig()
	}
	return l
}

// run takes the port (retrying while another program holds it: the
// first failure is logged with the fix, the retries at V(1)) and serves
// until ctx ends.
func (l *listener) run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("listener", l.name, "address", l.addr)
	wait := bindRetryMin
	for try := 0; ; try++ {
		ln, err := net.Listen("tcp", l.addr)
		if err == nil {
			l.serve(ctx, logger, ln)
			return
		}
		if try == 0 {
			logger.Error(err, "Ingress: cannot listen: Ingresses are not served on this port until it is free (retrying); free the port, or pass --disable=ingress to run another ingress controller")
		} else {
			logger.V(1).Info("Ingress: still cannot listen", "err", err.Error())
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, bindRetryMax)
	}
}

func (l *listener) serve(ctx context.Context, logger klog.Logger, ln net.Listener) {
	l.mu.Lock()
	l.bound = ln
	l.mu.Unlock()
	logger.V(1).Info("Ingress: listening", "port", portOf(ln.Addr()))
	l.onBind(portOf(ln.Addr()))
	ln = netutil.LimitListener(ln, maxConnections)
	go func() {
		<-ctx.Done()
		_ = l.srv.Close()
	}()
	var err error
	if l.tls {
		err = l.srv.ServeTLS(ln, "", "")
	} else {
		err = l.srv.Serve(ln)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error(err, "Ingress: the listener failed")
	}
}

// drainTimeout bounds how long a stop waits for requests in flight (a
// long poll or a download would otherwise hold the server's stop).
const drainTimeout = 5 * time.Second

// shutdown stops accepting, lets the requests in flight end for up to
// drainTimeout (or ctx), then closes every connection.
func (l *listener) shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	if err := l.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("ingress %s listener: %w", l.name, err)
	}
	return l.srv.Close()
}

// Addr is where the listener is bound; nil before.
func (l *listener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bound == nil {
		return nil
	}
	return l.bound.Addr()
}

// klogWriter sends net/http's error log lines to klog.
type klogWriter struct{ v klog.Logger }

func (w klogWriter) Write(b []byte) (int, error) {
	w.v.Info(strings.TrimSpace(string(b)))
	return len(b), nil
}
