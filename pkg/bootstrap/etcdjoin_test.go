package bootstrap

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/pkg/join"
)

// TestFetchBootstrapRetries: a joining server waits out a server that is not
// up yet or does not know the token yet, and gives up at once on an answer
// that will not change. It used to retry every HTTP client error (a
// url.Error is a net.Error), a server that does not speak TLS included, for
// the whole 30 s.
func TestFetchBootstrapRetries(t *testing.T) {
	// answers serves the codes in order, the last one from then on.
	answers := func(codes ...int) (*httptest.Server, *atomic.Int32) {
		var n atomic.Int32
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			i := int(n.Add(1)) - 1
			code := codes[min(i, len(codes)-1)]
			http.Error(w, http.StatusText(code), code)
		}))
		t.Cleanup(srv.Close)
		return srv, &n
	}
	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)
	closedURL := "https://" + testenv.RefusingAddr(t)

	refusedThenBad, refusedThenBadN := answers(http.StatusUnauthorized, http.StatusServiceUnavailable, http.StatusBadRequest)
	tests := []struct {
		name      string
		server    string
		window    time.Duration // the caller's deadline
		requests  *atomic.Int32 // nil: not counted
		wantN     int32
		wantErr   string
		wantIs    error
		maxWithin time.Duration
	}{
		{name: "refused, unavailable, then a final answer", server: refusedThenBad.URL, window: 20 * time.Second,
			requests: refusedThenBadN, wantN: 3, wantErr: "HTTP 400", maxWithin: 10 * time.Second},
		{name: "nothing listens: retried until the deadline", server: closedURL, window: 2500 * time.Millisecond,
			wantIs: join.ErrUnavailable, maxWithin: 10 * time.Second},
		{name: "not a TLS server: at once", server: "https://" + plain.Listener.Addr().String(), window: 20 * time.Second,
			wantErr: "http", maxWithin: 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.window)
			defer cancel()
			begin := time.Now()
			_, err := fetchBootstrap(ctx, tc.server, join.Token{Secret: "0123456789abcdef-cluster"})
			took := time.Since(begin)
			if err == nil {
				t.Fatal("fetchBootstrap succeeded")
			}
			if took > tc.maxWithin {
				t.Errorf("fetchBootstrap took %s, want at most %s (err: %v)", took, tc.maxWithin, err)
			}
			if tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %q is not %q", err, tc.wantIs)
			}
			if tc.requests != nil && tc.requests.Load() != tc.wantN {
				t.Errorf("%d requests, want %d", tc.requests.Load(), tc.wantN)
			}
		})
	}
}
