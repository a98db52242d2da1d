package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestSDNotify runs the real server under a fake systemd: a unixgram socket
// in $NOTIFY_SOCKET must get READY=1 once /readyz is 200, then STOPPING=1 on
// SIGTERM, for a path socket and an abstract ('@') one.
func TestSDNotify(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the server")
	}
	parallel(t)
	tests := []struct {
		name   string
		socket func(dir string) string
	}{
		{name: "path socket", socket: func(dir string) string { return filepath.Join(dir, "notify.sock") }},
		{name: "abstract socket", socket: func(string) string {
			return fmt.Sprintf("@edgeplane-e2e-notify-%d-%d", os.Getpid(), time.Now().UnixNano())
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			addr := tc.socket(dir)
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			data := filepath.Join(dir, "data")
			s := launchCmd(t, data, withEnv(command(data), "NOTIFY_SOCKET="+addr))
			msg := readNotify(t, conn, s, 3*time.Minute)
			// Ours, with its STATUS: the API server's own early READY=1
			// (sent before /readyz is 200) must not come first.
			if !strings.Contains(msg, "READY=1") || !strings.Contains(msg, "STATUS=ready in") {
				t.Fatalf("first message %q, want READY=1 with STATUS=ready in ...", msg)
			}
			// The ready line is logged before READY=1 is sent; allow for the
			// log pipe to be read.
			select {
			case <-s.ready:
			case <-time.After(10 * time.Second):
				t.Fatalf("READY=1 came without the ready line:\n%s", tail(s.output.String()))
			}
			// READY=1 promises a ready API server.
			cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			client := kubernetes.NewForConfigOrDie(cfg)
			var status int
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
			if status != 200 {
				t.Fatalf("/readyz = %d after READY=1", status)
			}

			s.stop()
			if msg := readNotify(t, conn, s, 10*time.Second); !strings.Contains(msg, "STOPPING=1") {
				t.Fatalf("message after SIGTERM %q, want STOPPING=1", msg)
			}
		})
	}
}

// readNotify waits for one datagram from the server.
func readNotify(t *testing.T, conn *net.UnixConn, s *server, timeout time.Duration) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message within %s (%v):\n%s", timeout, err, tail(s.output.String()))
	}
	return string(buf[:n])
}
