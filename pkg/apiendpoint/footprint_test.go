package apiendpoint

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// childEnv holds the Config of an endpoint that the test binary runs as a
// process of its own (TestMain), so that its footprint is measured alone.
const childEnv = "EDGEPLANE_TEST_APIENDPOINT_CHILD"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg))
	}
	os.Exit(m.Run())
}

// runChild runs an endpoint of the JSON Config cfg until stdin closes; it
// prints its RSS before the start, then "ready", then on each line read from
// stdin its goroutine count.
func runChild(cfg string) int {
	var c Config
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rss, _ := procfs.RSS(os.Getpid())
	fmt.Printf("rss-before %d\n", rss)
	e, err := New(c)
	if err == nil {
		err = e.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Printf("goroutines %d\n", runtime.NumGoroutine())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Stop(ctx)
	return 0
}

// footprint measures an endpoint process in front of c's member 1: its RSS
// and goroutines idle, then with clients connections open through it.
func footprint(t *testing.T, c *testapiserver.Cluster, clients int) {
	cfg, _ := json.Marshal(Config{Listen: freeAddr(t), Server: c.Members[1].Addr, CAFile: c.PKI.ServerCA.Cert})
	var listen struct{ Listen string }
	_ = json.Unmarshal(cfg, &listen)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	out := bufio.NewScanner(stdout)
	line := func(prefix string) string {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("the endpoint process ended (want %q)", prefix)
		}
		l := out.Text()
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("the endpoint process said %q, want %q", l, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, prefix))
	}
	before, _ := strconv.ParseInt(line("rss-before"), 10, 64)
	line("ready")
	goroutines := func() string {
		t.Helper()
		if _, err := io.WriteString(stdin, "\n"); err != nil {
			t.Fatal(err)
		}
		return line("goroutines")
	}
	pid := cmd.Process.Pid
	idle, _ := procfs.RSS(pid)
	idleG := goroutines()

	caPEM, err := os.ReadFile(c.PKI.ServerCA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for i := range clients {
		// One transport per client: each holds its own connection open.
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}, Timeout: 10 * time.Second}
		resp, err := hc.Get("https://" + listen.Listen + "/readyz")
		if err != nil {
			t.Fatalf("client %d through the endpoint process: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("client %d: %s", i, resp.Status)
		}
	}
	busy, _ := procfs.RSS(pid)
	busyG := goroutines()
	t.Logf("endpoint process RSS: %d KiB before Start, %d KiB started (one server), %d KiB with %d connections through it; goroutines %s idle, %s with %d connections",
		before>>10, idle>>10, busy>>10, clients, idleG, busyG, clients)
}
