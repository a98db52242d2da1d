package sdnotify

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNotifySocket(t *testing.T) {
	abstract := fmt.Sprintf("@edgeplane-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	tests := []struct {
		name     string
		listen   string // socket to listen on; "" for none
		path     string
		wantSent bool
		wantErr  string
	}{
		{name: "no socket does nothing", path: ""},
		{name: "path socket", listen: "file", path: "file", wantSent: true},
		{name: "abstract socket", listen: abstract, path: abstract, wantSent: true},
		{name: "relative name is refused", path: "relative/sock", wantErr: "neither a path nor an abstract"},
		{name: "nobody listening", path: "missing", wantErr: "sd_notify"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			abs := func(p string) string {
				if p == "file" || p == "missing" {
					return filepath.Join(dir, p+".sock")
				}
				return p
			}
			var conn *net.UnixConn
			if tc.listen != "" {
				c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: abs(tc.listen), Net: "unixgram"})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				conn = c
			}
			sent, err := NotifySocket(abs(tc.path), Ready+"\nSTATUS=test")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || sent != tc.wantSent {
				t.Fatalf("sent = %v, err = %v; want sent = %v", sent, err, tc.wantSent)
			}
			if conn == nil {
				return
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 256)
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(buf[:n]); got != "READY=1\nSTATUS=test" {
				t.Fatalf("got %q", got)
			}
		})
	}
}

func TestTakeFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv(SocketEnv, path)
	n := TakeFromEnvironment()
	if v, ok := os.LookupEnv(SocketEnv); ok {
		t.Fatalf("%s still set to %q", SocketEnv, v)
	}
	ctx := NewContext(context.Background(), n)
	if sent, err := FromContext(ctx).Notify(Stopping); !sent || err != nil {
		t.Fatalf("sent %v, err %v", sent, err)
	}
	if sent, err := FromContext(context.Background()).Notify(Ready); sent || err != nil {
		t.Fatalf("a context without a notifier sent %v, err %v", sent, err)
	}
}
