// Package sdnotify tells the service manager about the server's state with
// the sd_notify protocol: one datagram of newline-separated KEY=VALUE pairs
// to the unix socket named by $NOTIFY_SOCKET. A name starting with '@' is an
// abstract socket. Without $NOTIFY_SOCKET (not run by systemd with
// Type=notify) every call does nothing. No dependency: the protocol is one
// write to a unixgram socket.
package sdnotify

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"
)

// SocketEnv is the variable systemd sets for Type=notify services.
const SocketEnv = "NOTIFY_SOCKET"

// States of the protocol that edgeplane sends.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
)

// writeTimeout bounds a send: the service manager reads at once, and a
// stalled socket must not hold up start-up or shutdown.
const writeTimeout = time.Second

// Notifier sends to one socket; the zero value does nothing.
type Notifier struct{ socket string }

// TakeFromEnvironment returns a Notifier for $NOTIFY_SOCKET and removes the
// variable from the environment. The upstream API server sends its own
// READY=1 as soon as it serves, before /readyz is 200, through the same
// variable; taken away, that early message is not sent and only ours is.
// Call it once, before the API server starts.
func TakeFromEnvironment() Notifier {
	n := Notifier{socket: os.Getenv(SocketEnv)}
	_ = os.Unsetenv(SocketEnv)
	return n
}

// Notify sends state (for example "READY=1\nSTATUS=...") to the socket.
// It reports whether a message was sent; no socket is not an error.
func (n Notifier) Notify(state string) (bool, error) {
	return NotifySocket(n.socket, state)
}

type contextKey struct{}

// NewContext carries n to the code that knows when the server is ready.
func NewContext(ctx context.Context, n Notifier) context.Context {
	return context.WithValue(ctx, contextKey{}, n)
}

// FromContext returns the Notifier in ctx, or one that does nothing.
func FromContext(ctx context.Context) Notifier {
	n, _ := ctx.Value(contextKey{}).(Notifier)
	return n
}

// NotifySocket sends state to the socket at path, as Notify does.
func NotifySocket(path, state string) (bool, error) {
	if path == "" {
		return false, nil
	}
	if path[0] != '/' && path[0] != '@' {
		return false, fmt.Errorf("sd_notify: %s=%q is neither a path nor an abstract socket name", SocketEnv, path)
	}
	// The Go runtime maps a leading '@' to the abstract namespace (a leading NUL).
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sd_notify: %w", err)
	}
	return true, nil
}
