package nodetunnel

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// BenchmarkKubelet measures what the tunnel adds to the API server's
// requests to a kubelet, on loopback (so the figures are the tunnel's own
// cost, not a network's): a request on a new connection (dial, TLS
// handshake, request: what each `kubectl logs`, `exec` and `port-forward`
// starts with), a request on an open connection, and a MiB read.
//
//	go test -run '^$' -bench Kubelet -benchtime 2s ./pkg/nodetunnel/
func BenchmarkKubelet(b *testing.B) {
	for _, route := range []struct {
		name string
		mode Mode
	}{{"direct", ModeAuto}, {"tunnel", ModeAlways}} {
		for _, req := range []struct {
			name, path string
			keepAlive  bool
		}{{"new-connection", "/", false}, {"open-connection", "/", true}, {"MiB", "/mib", true}} {
			b.Run(route.name+"/"+req.name, func(b *testing.B) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				c := startCluster(b, ctx)
				c.startAgent(b, ctx, route.mode, c.pki.client(b, "system:node:a", "system:nodes"))
				c.waitConnected(b, ctx, "a")
				want := directFrom
				if route.mode == ModeAlways {
					want = "127.0.0.1"
				}
				client := &http.Client{Transport: &http.Transport{
					DialContext: c.tunnel.DialContext, DisableKeepAlives: !req.keepAlive,
					TLSClientConfig: &tls.Config{RootCAs: c.pki.pool},
				}}
				defer client.CloseIdleConnections()
				for { // until the probe's verdict
					if got, _ := c.get(ctx); got == want {
						break
					}
					select {
					case <-ctx.Done():
						b.Fatal(ctx.Err())
					case <-time.After(10 * time.Millisecond):
					}
				}
				url := "https://" + c.kubeletAddr + req.path
				b.ResetTimer()
				for b.Loop() {
					resp, err := client.Get(url)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					b.SetBytes(n)
				}
			})
		}
	}
}

// BenchmarkIdleTunnel measures the heap an idle tunnel holds, both ends
// together (the agent's end alone holds about half): n agents connected
// to one server, in this process.
func BenchmarkIdleTunnel(b *testing.B) {
	const n = 50
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		c := startCluster(b, ctx)
		certs := make([]string, n)
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("n%02d", i)
			certs[i] = c.pki.client(b, "system:node:"+names[i], "system:nodes")
		}
		before := heapInUse()
		for i := range n {
			c.startAgent(b, ctx, ModeAlways, certs[i])
		}
		c.waitConnected(b, ctx, names...)
		b.ReportMetric(float64(heapInUse()-before)/n, "heap-B/tunnel")
		cancel()
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
