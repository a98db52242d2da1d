// Package nodetunnel carries the API server's connections to a node's
// kubelet (logs, exec, attach, port-forward, the node proxy and the metrics
// scrape) over a connection the node opens to the server, for nodes the
// servers cannot reach: behind NAT, or behind a firewall that drops
// connections towards the node.
//
//	agent (Agent)                                server (Server)
//	  TLS to every server's API port, with the     the API server's handler: the path below
//	  node's client certificate, HTTP/1.1          authenticated by the API server's own
//	  GET Path, Upgrade: UpgradeToken     ---->    authenticator; system:node:NAME only
//	                                      <----    101 Switching Protocols
//	  yamux session (the agent is yamux's server: the server opens streams)
//	  stream: "host:port\n"               <----    Dial(host:port) of a kubelet address of NAME
//	  host is one of this host's addresses
//	  and port is the kubelet's: dial it,
//	  "OK\n" (or "ERR reason\n"), then bytes
//
// The server dials a node's kubelet through its tunnel only when direct
// dialing does not work (Mode auto, the default: probed when the tunnel
// connects and every ProbeInterval, and on a failed dial) or the node asks
// for it (Mode always); every other address is dialled directly.
package nodetunnel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
)

const (
	// Path is the API port's path the agent opens its tunnel on.
	Path = "/edgeplane.io/node-tunnel"
	// UpgradeToken is the protocol of the upgraded connection.
	UpgradeToken = "edgeplane-node-tunnel/1"
	// ModeHeader carries the agent's Mode.
	ModeHeader = "Edgeplane-Tunnel-Mode"
)

// Mode says when the server uses a node's tunnel.
type Mode string

const (
	// ModeAuto: the tunnel when direct dials to the node's kubelet fail.
	ModeAuto Mode = "auto"
	// ModeAlways: every dial to the node's kubelet through the tunnel.
	ModeAlways Mode = "always"
	// ModeOff: no tunnel (the agent does not open one).
	ModeOff Mode = "off"
)

// ParseMode parses the --node-tunnel value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case ModeAuto, ModeAlways, ModeOff:
		return m, nil
	case "":
		return ModeAuto, nil
	}
	return "", fmt.Errorf("node tunnel mode %q: want auto, always or off", s)
}

// maxLine bounds a stream's header and answer lines.
const maxLine = 512

// streamHeaderTimeout bounds the exchange of a new stream's header and
// answer (the agent's dial of its own kubelet is on the same host).
const streamHeaderTimeout = 10 * time.Second

// yamuxConfig is the session configuration of both ends: keepalives every
// 15 s find a dead link (and keep NAT mappings open); writes that block 10 s
// end the session.
func yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.KeepAliveInterval = 15 * time.Second
	c.ConnectionWriteTimeout = 10 * time.Second
	c.LogOutput = io.Discard
	return c
}

// readLine reads one "\n"-terminated line of at most maxLine bytes, one byte
// at a time, so that nothing after it is consumed.
func readLine(r io.Reader) (string, error) {
	var b strings.Builder
	buf := make([]byte, 1)
	for b.Len() <= maxLine {
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if buf[0] == '\n' {
			return b.String(), nil
		}
		b.WriteByte(buf[0])
	}
	return "", errors.New("line too long")
}

// answer is the agent's reply to a stream's header: nil is "OK".
func answer(w io.Writer, err error) error {
	line := "OK\n"
	if err != nil {
		line = "ERR " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
	}
	_, werr := io.WriteString(w, line)
	return werr
}

// readAnswer reads the agent's reply.
func readAnswer(r io.Reader) error {
	line, err := readLine(r)
	if err != nil {
		return err
	}
	if line == "OK" {
		return nil
	}
	if msg, ok := strings.CutPrefix(line, "ERR "); ok {
		return errors.New(msg)
	}
	return fmt.Errorf("unexpected answer %q", line)
}

// bufferedConn is a connection whose first bytes were read into a
// bufio.Reader (an HTTP request's or response's reader).
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// withBuffer returns c, reading first what r holds of it.
func withBuffer(c net.Conn, r *bufio.Reader) net.Conn {
	if r == nil || r.Buffered() == 0 {
		return c
	}
	return &bufferedConn{Conn: c, r: r}
}

// splice copies both ways until either side ends, then closes both.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
	_ = a.Close()
	_ = b.Close()
}
