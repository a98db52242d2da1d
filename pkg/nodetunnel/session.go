package nodetunnel

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"k8s.io/klog/v2"
)

// session is one node's tunnel on this server.
type session struct {
	node string
	mode Mode
	mux  *yamux.Session

	mu sync.Mutex
	// direct: the last probe (or dial) reached the node's kubelet
	// directly; known: there was one.
	direct, known bool
}

// tunnelFirst says whether dials go through the tunnel: always in
// ModeAlways; in ModeAuto until a probe found direct dials to work.
func (ss *session) tunnelFirst() bool {
	if ss.mode == ModeAlways {
		return true
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return !ss.direct
}

// setDirect records whether the node's kubelet answers direct dials, and
// logs when that changes.
func (ss *session) setDirect(logger klog.Logger, direct bool, cause error) {
	ss.mu.Lock()
	changed := !ss.known || ss.direct != direct
	ss.direct, ss.known = direct, true
	ss.mu.Unlock()
	if !changed {
		return
	}
	if direct {
		logger.Info("Node's kubelet answers direct dials: the tunnel stands by")
	} else if cause != nil {
		logger.Info("A direct dial of the node's kubelet failed: dialling through its tunnel", "err", cause)
	} else {
		logger.Info("Node's kubelet does not answer direct dials: dialling through its tunnel")
	}
}

// dial opens a stream and asks the node's agent to dial addr.
func (ss *session) dial(ctx context.Context, addr string) (net.Conn, error) {
	st, err := ss.mux.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("node %s tunnel: %w", ss.node, err)
	}
	deadline := time.Now().Add(streamHeaderTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = st.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Now()) })
	err = writeHeader(st, addr)
	if err == nil {
		err = readAnswer(st)
	}
	stopped := stop()
	if err == nil && !stopped {
		err = ctx.Err()
	}
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("node %s tunnel: dial %s: %w", ss.node, addr, err)
	}
	_ = st.SetDeadline(time.Time{})
	return st, nil
}

// writeHeader asks for addr.
func writeHeader(st net.Conn, addr string) error {
	if len(addr) >= maxLine {
		return fmt.Errorf("address too long")
	}
	_, err := st.Write([]byte(addr + "\n"))
	return err
}
