package e2e

import (
	"bytes"
	"context"
	encbinary "encoding/binary"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// hostileRSSBudgetMiB bounds the server's RSS through every attack: the
// default profile's budget (see loadRSSBudgetMiB).
var hostileRSSBudgetMiB = loadRSSBudgetMiB["default"]

// TestHostile sends hostile requests to a real server, with the admin client
// certificate and anonymously, and checks after each attack that the server
// is alive, ready, serving writes and within its memory budget.
func TestHostile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	s := startServer(t, t.TempDir(), "--profile=default")
	rss := procfs.RSSSampler(s.cmd.Process.Pid, 200*time.Millisecond)
	before := rss.Current()
	t.Cleanup(func() {
		peak, last := rss.Stop()
		t.Logf("server RSS over the hostile-input test: before %d MiB, peak %d MiB, end %d MiB (bound %d MiB)",
			before>>20, peak>>20, last>>20, hostileRSSBudgetMiB)
	})
	admin := hostileHTTPClient(t, s, true)
	anon := hostileHTTPClient(t, s, false)
	cms := s.config.Host + "/api/v1/namespaces/default/configmaps"

	t.Run("oversized bodies", func(t *testing.T) {
		big := hostileConfigMapJSON("big", strings.Repeat("x", 4<<20)) // over the 3 MiB request limit
		fixed := func(b []byte) func(context.Context) io.Reader {
			return func(context.Context) io.Reader { return bytes.NewReader(b) }
		}
		for _, tc := range []struct {
			name   string
			client *http.Client
			method string
			url    string
			ctype  string
			body   func(ctx context.Context) io.Reader
			length int64 // -1: unknown (chunked)
			want   int
		}{
			{"admin create 4 MiB JSON", admin, "POST", cms, "application/json", fixed(big), int64(len(big)), 413},
			{"admin update 4 MiB JSON", admin, "PUT", cms + "/big", "application/json", fixed(big), int64(len(big)), 413},
			{"admin merge patch 4 MiB", admin, "PATCH", cms + "/big", "application/merge-patch+json", fixed(big), int64(len(big)), 413},
			{"admin create 4 MiB protobuf", admin, "POST", cms, "application/vnd.kubernetes.protobuf", fixed(hostileProtobufGarbage(4<<20, 1)), 4<<20 + 4, 413},
			{"admin create 256 MiB streamed without length", admin, "POST", cms, "application/json", func(context.Context) io.Reader { return io.LimitReader(hostileZeros{}, 256<<20) }, -1, 413},
			{"anonymous create 4 MiB JSON", anon, "POST", cms, "application/json", fixed(big), int64(len(big)), 401},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				counted := &hostileCounter{r: tc.body(ctx)}
				req, err := http.NewRequestWithContext(ctx, tc.method, tc.url, counted)
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = tc.length
				req.Header.Set("Content-Type", tc.ctype)
				start := time.Now()
				resp, err := tc.client.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v after %s, %d bytes sent", tc.method, tc.url, err, time.Since(start), counted.n.Load())
				}
				took, sent := time.Since(start), counted.n.Load()
				msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				resp.Body.Close()
				t.Logf("%d after %s, %.1f MiB of the body consumed: %s", resp.StatusCode, took.Round(time.Millisecond), float64(sent)/(1<<20), hostileOneLine(msg))
				if resp.StatusCode != tc.want {
					t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
				}
				if tc.length < 0 && sent > 64<<20 {
					t.Errorf("the server read %d MiB of a streamed body before refusing it", sent>>20)
				}
			})
		}
		// A body that never comes: Content-Length 1 GiB, 1 KiB sent, then silence.
		// Anonymous: refused before the body is read, and the connection
		// closed (the server cannot read past the 1 GiB it will not take).
		t.Run("anonymous stalled body", func(t *testing.T) {
			code, took, closed := hostileStalledBody(t, s, false, 30*time.Second)
			t.Logf("%d after %s; connection closed by the server after the response: %v", code, took.Round(100*time.Microsecond), closed)
			if code != 401 {
				t.Errorf("status %d, want 401 before the body is read", code)
			}
			if !closed {
				t.Errorf("the server kept the connection open after refusing a 1 GiB body it did not read")
			}
		})
		// Authenticated, the server waits for the body. The expected
		// behaviour, asserted: over HTTP/2 other requests on the same
		// connection are served meanwhile, and the 60 s request timeout
		// answers 504 (full form); over HTTP/1.1 there is no answer at all
		// (the timeout filter's 504 needs the request body's lock, which
		// the handler blocked reading the body holds: net/http), so the
		// request lives as long as the client keeps the connection, and the
		// server lets go of the connection once the client leaves. The CI
		// form stalls for a few seconds; the full form past the timeout.
		stall, h2Wait := 5*time.Second, 5*time.Second
		if loadFull() {
			stall, h2Wait = 75*time.Second, 75*time.Second
		}
		t.Run("admin stalled body over h2", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), h2Wait)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "POST", cms, io.MultiReader(bytes.NewReader(bytes.Repeat([]byte{' '}, 1024)), hostileBlock{ctx}))
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = 1 << 30
			req.Header.Set("Content-Type", "application/json")
			type result struct {
				resp *http.Response
				err  error
				took time.Duration
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				// Without admin's one-minute client timeout: the context bounds it.
				resp, err := (&http.Client{Transport: admin.Transport}).Do(req)
				done <- result{resp, err, time.Since(start)}
			}()
			// The same client (one HTTP/2 connection) is served meanwhile.
			if code := hostileDo(t, admin, "GET", s.config.Host+"/readyz", "", nil); code != 200 {
				t.Errorf("GET /readyz beside the stalled request: %d, want 200", code)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(h2Wait + time.Minute):
				t.Fatalf("the stalled request did not end a minute after its context (%s)", h2Wait)
			}
			if !loadFull() {
				// The Go HTTP/2 client hands a response over only when the
				// body write ends, here when ctx does: within the CI form's
				// seconds the request only ends with its context.
				if r.err == nil {
					r.resp.Body.Close()
					t.Fatalf("answered %d after %s, before the body was sent or the 60 s request timeout", r.resp.StatusCode, r.took.Round(time.Millisecond))
				}
				t.Logf("no answer within %s, as expected: %v", h2Wait, r.err)
				return
			}
			// Full form: a 504 handed over when ctx ends shows that the server
			// answered within these 75 s (its request timeout is 60 s).
			if r.err != nil {
				t.Fatalf("no response after %s: %v", r.took, r.err)
			}
			r.resp.Body.Close()
			t.Logf("%d (%s), handed over after %s", r.resp.StatusCode, r.resp.Proto, r.took.Round(time.Millisecond))
			if r.resp.StatusCode != 504 {
				t.Errorf("status %d, want 504 from the 60 s request timeout", r.resp.StatusCode)
			}
		})
		t.Run("admin stalled body over http1.1", func(t *testing.T) {
			pid := s.cmd.Process.Pid
			fds := hostileFDs(pid)
			code, took, _ := hostileStalledBody(t, s, true, stall)
			if code != 0 {
				t.Errorf("status %d after %s; want no answer (net/http cannot time out a handler blocked reading the body): "+
					"if this is now a 504, the request timeout covers stalled bodies, update this test and docs/RELIABILITY.md", code, took.Round(time.Millisecond))
			} else {
				t.Logf("no answer %s after the request, as expected", took.Round(time.Millisecond))
			}
			// Once the client goes, the server lets go of the connection.
			eventually(t, time.Minute, "the server to release the stalled connection", func(context.Context) (bool, error) {
				n := hostileFDs(pid)
				return n <= fds, fmt.Errorf("%d fds, %d before the stalled request", n, fds)
			})
		})
		hostileAfter(t, s, rss)
	})

	t.Run("deeply nested JSON and YAML", func(t *testing.T) {
		if code := hostileDo(t, admin, "POST", cms, "application/json", hostileConfigMapJSON("target", "v")); code != 201 && code != 409 {
			t.Fatalf("create the patch target: %d", code)
		}
		const depth = 100000
		arrays := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		objects := strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
		nestedObj := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep","x":` + arrays + `}}`
		for _, tc := range []struct {
			name, method, url, ctype, body string
		}{
			{"create: 10^5 nested arrays in an unknown field", "POST", cms, "application/json", nestedObj},
			{"create: 10^5 nested objects as a data value", "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"data":{"k":` + objects + `}}`},
			{"create: 10^6 nested arrays (2 MB)", "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep","x":` + strings.Repeat("[", 1e6) + strings.Repeat("]", 1e6) + `}}`},
			{"merge patch: 10^5 levels", "PATCH", cms + "/target", "application/merge-patch+json", `{"data":{"k":` + arrays + `}}`},
			{"strategic merge patch: 10^5 levels", "PATCH", cms + "/target", "application/strategic-merge-patch+json", `{"data":{"k":` + objects + `}}`},
			{"JSON patch: 10^5 levels", "PATCH", cms + "/target", "application/json-patch+json", `[{"op":"add","path":"/data/x","value":` + arrays + `}]`},
			{"apply patch: 10^5 levels", "PATCH", cms + "/target?fieldManager=hostile", "application/apply-patch+yaml", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"target"},"data":{"k":` + arrays + `}}`},
			{"YAML create: 10^5 nested flow sequences", "POST", cms, "application/yaml", nestedObj},
			{"YAML create: 10^5 nested flow mappings", "POST", cms, "application/yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\nx: " + strings.Repeat("{a: ", depth) + "1" + strings.Repeat("}", depth) + "\n"},
			{"YAML create: billion laughs", "POST", cms, "application/yaml", hostileBillionLaughs()},
			{"apply patch: billion laughs", "PATCH", cms + "/target?fieldManager=hostile", "application/apply-patch+yaml", hostileBillionLaughs()},
		} {
			t.Run(tc.name, func(t *testing.T) {
				start := time.Now()
				code, msg := hostileDoMsg(t, admin, tc.method, tc.url, tc.ctype, []byte(tc.body))
				took := time.Since(start)
				t.Logf("%d after %s: %s", code, took.Round(time.Millisecond), msg)
				if code != 400 && code != 422 {
					t.Errorf("status %d, want a clean 400 or 422 refusal", code)
				}
				if took > 10*time.Second {
					t.Errorf("took %s to refuse", took)
				}
			})
		}
		hostileAfter(t, s, rss)
	})

	t.Run("invalid protobuf", func(t *testing.T) {
		rng := mrand.New(mrand.NewPCG(7, 11))
		bodies := map[string][]byte{
			"magic only":                          []byte("k8s\x00"),
			"Unknown with a 2^40-byte raw field":  hostileProtobufUnknown([]byte{0x12, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 'a'}),
			"ConfigMap claiming a 2^31-byte meta": hostileProtobufUnknown(append([]byte{0x12, 0x07}, []byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x08, 'x'}...)),
		}
		for i := 0; i < 40; i++ {
			bodies[fmt.Sprintf("magic + %d random bytes #%d", 1<<(i%16), i)] = hostileProtobufGarbage(1<<(i%16), rng.Uint64())
			raw := make([]byte, 1+rng.IntN(4096))
			for j := range raw {
				raw[j] = byte(rng.Uint32())
			}
			bodies[fmt.Sprintf("Unknown{v1 ConfigMap} + %d random raw bytes #%d", len(raw), i)] = hostileProtobufUnknown(append(append([]byte{0x12}, encbinary.AppendUvarint(nil, uint64(len(raw)))...), raw...))
		}
		counts := map[int]int{}
		for name, body := range bodies {
			code, msg := hostileDoMsg(t, admin, "POST", cms, "application/vnd.kubernetes.protobuf", body)
			counts[code]++
			// 422: random bytes that happen to decode as an (invalid) ConfigMap.
			if code != 400 && code != 422 {
				t.Errorf("%s: status %d, want 400 (or 422): %s", name, code, msg)
			}
		}
		// Anonymous garbage is refused before it is decoded.
		if code := hostileDo(t, anon, "POST", cms, "application/vnd.kubernetes.protobuf", hostileProtobufGarbage(1024, 3)); code != 401 {
			t.Errorf("anonymous protobuf garbage: %d, want 401", code)
		}
		t.Logf("%d garbage protobuf bodies: statuses %v", len(bodies), counts)
		hostileAfter(t, s, rss)
	})

	hostileConnections(t, s, rss)
}
