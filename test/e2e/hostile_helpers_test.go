package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// hostileStalledBody sends, over HTTP/1.1, a create that declares a 1 GiB
// body and sends 1 KiB of it; it returns the status (0: none within wait),
// how long the server took to answer and whether it then closed the
// connection within 5 s.
func hostileStalledBody(t *testing.T, s *server, admin bool, wait time.Duration) (int, time.Duration, bool) {
	t.Helper()
	addr := strings.TrimPrefix(s.config.Host, "https://")
	base, err := hostileTLSConfig(s, admin)
	if err != nil {
		t.Fatal(err)
	}
	c, err := hostileDial(addr, base, "http1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: " + addr +
		"\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n"
	start := time.Now()
	if _, err := c.Write(append([]byte(head), bytes.Repeat([]byte{' '}, 1024)...)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(start.Add(wait))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, time.Since(start), false
	}
	if err != nil {
		t.Fatalf("after %s: %v", time.Since(start), err)
	}
	took := time.Since(start)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = br.ReadByte()
	closed := err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
	return resp.StatusCode, took, closed
}

// hostileAfter is the check after every attack: alive, /readyz 200, a
// create and get work, RSS under the bound.
func hostileAfter(t *testing.T, s *server, rss *procfs.Sampler) {
	t.Helper()
	loadAssertHealthy(t, s)
	if peak := rss.Peak(); peak>>20 >= int64(hostileRSSBudgetMiB) {
		t.Errorf("server RSS peaked at %d MiB, bound %d MiB", peak>>20, hostileRSSBudgetMiB)
	}
}

// hostileHTTPClient is an HTTP client trusting the server's CA, with the
// admin client certificate when admin is set and anonymous otherwise.
func hostileHTTPClient(t *testing.T, s *server, admin bool) *http.Client {
	t.Helper()
	tlsc, err := hostileTLSConfig(s, admin)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsc, ForceAttemptHTTP2: true}, Timeout: time.Minute}
}

func hostileTLSConfig(s *server, admin bool) (*tls.Config, error) {
	c := rest.CopyConfig(s.config)
	if !admin {
		c = &rest.Config{Host: c.Host, TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData, CAFile: c.CAFile}}
	}
	return rest.TLSConfigFor(c)
}

func hostileDo(t *testing.T, c *http.Client, method, url, ctype string, body []byte) int {
	code, _ := hostileDoMsg(t, c, method, url, ctype, body)
	return code
}

func hostileDoMsg(t *testing.T, c *http.Client, method, url, ctype string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode, hostileOneLine(msg)
}

func hostileOneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func hostileConfigMapJSON(name, value string) []byte {
	return []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `"},"data":{"k":"` + value + `"}}`)
}

// hostileBillionLaughs is a ConfigMap whose last key expands 9^10 times.
func hostileBillionLaughs() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: laughs\n")
	b.WriteString(`a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]` + "\n")
	for i := 1; i < 10; i++ {
		refs := strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d,", i-1), 9), ",")
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, refs)
	}
	b.WriteString("data:\n  k: v\nx: *a9\n")
	return b.String()
}

// hostileProtobufGarbage is the Kubernetes protobuf magic and n random bytes.
func hostileProtobufGarbage(n int, seed uint64) []byte {
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, 4+n)
	copy(b, "k8s\x00")
	for i := 4; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// hostileProtobufUnknown wraps rest (the Unknown's fields after TypeMeta)
// in the magic and a valid TypeMeta{v1, ConfigMap}.
func hostileProtobufUnknown(rest []byte) []byte {
	tm := append([]byte{0x0a, 2}, "v1"...)
	tm = append(append(tm, 0x12, 9), "ConfigMap"...)
	b := append([]byte("k8s\x00\x0a"), byte(len(tm)))
	return append(append(b, tm...), rest...)
}

// hostileZeros is an endless JSON-ish body.
type hostileZeros struct{}

func (hostileZeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// hostileBlock is a request body that blocks until ctx ends.
type hostileBlock struct{ ctx context.Context }

func (b hostileBlock) Read([]byte) (int, error) {
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

// hostileCounter counts the bytes the transport read from a request body.
type hostileCounter struct {
	r io.Reader
	n atomic.Int64
}

func (c *hostileCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
