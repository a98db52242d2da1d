package bootstrap

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/pkg/sdnotify"
)

// fakeReadyNode is a node whose kubelet runs (or not) and that becomes
// Ready (or not, until ctx ends).
type fakeReadyNode struct {
	offline, kubelet, ready bool
}

func (f fakeReadyNode) Offline() bool    { return f.offline }
func (f fakeReadyNode) Began() time.Time { return time.Now() }

func (f fakeReadyNode) LocalReady(ctx context.Context) error { return f.wait(ctx, f.kubelet) }
func (f fakeReadyNode) Ready(ctx context.Context) error      { return f.wait(ctx, f.ready) }

func (fakeReadyNode) wait(ctx context.Context, ok bool) error {
	if ok {
		return nil
	}
	<-ctx.Done()
	return errors.New("not ready: " + ctx.Err().Error())
}

// TestAgentReportsReady: systemd hears READY=1 when the node is Ready; a
// node that started offline, which is not Ready before a server answers,
// says READY=1 once its kubelet runs, so that systemd's start timeout does
// not end it and start it again while no server answers.
func TestAgentReportsReady(t *testing.T) {
	const waiting, isReady = "runs its kubelet; waiting for an API server", "is Ready"
	for _, tc := range []struct {
		name string
		node fakeReadyNode
		want []string // the STATUS of each READY=1 sent, in order
	}{
		{"online, Ready", fakeReadyNode{kubelet: true, ready: true}, []string{isReady}},
		{"online, not Ready yet", fakeReadyNode{kubelet: true}, nil},
		{"offline, kubelet runs", fakeReadyNode{offline: true, kubelet: true}, []string{waiting}},
		{"offline, then Ready", fakeReadyNode{offline: true, kubelet: true, ready: true}, []string{waiting, isReady}},
		{"offline, kubelet not running", fakeReadyNode{offline: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			var got []string
			reportReady(ctx, tc.node, "edge-a", func(state string) {
				ready, status, ok := strings.Cut(state, "\nSTATUS=node edge-a ")
				if !ok || ready != sdnotify.Ready {
					t.Errorf("sent %q, want READY=1 and the node's STATUS", state)
				}
				got = append(got, status)
			})
			if !slices.Equal(got, tc.want) {
				t.Errorf("sent READY=1 with STATUS %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAgentReleasesStartupPages: an agent releases the binary's start-up
// pages once its node runs (Ready, or its kubelet running offline), with the
// delay asked for, once; a node that never runs keeps them (its start-up is
// not over).
func TestAgentReleasesStartupPages(t *testing.T) {
	for _, tc := range []struct {
		name string
		node fakeReadyNode
		want bool
	}{
		{"online, Ready", fakeReadyNode{kubelet: true, ready: true}, true},
		{"online, not Ready yet", fakeReadyNode{kubelet: true}, false},
		{"offline, kubelet runs", fakeReadyNode{offline: true, kubelet: true}, true},
		{"offline, then Ready", fakeReadyNode{offline: true, kubelet: true, ready: true}, true},
		{"offline, kubelet not running", fakeReadyNode{offline: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			const delay = 42 * time.Second
			released := make(chan time.Duration, 2)
			tasks := agentTasks(tc.node, "edge-a", func(string) {}, delay, func(_ context.Context, d time.Duration) { released <- d })
			for _, task := range tasks {
				if err := task.Start(ctx); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case d := <-released:
				if !tc.want {
					t.Errorf("released the start-up pages of a node that does not run")
				} else if d != delay {
					t.Errorf("released after %v, want %v", d, delay)
				}
			case <-time.After(200 * time.Millisecond):
				if tc.want {
					t.Errorf("the start-up pages of a running node were not released")
				}
			}
			for _, task := range tasks {
				if err := task.Stop(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if n := len(released); n != 0 {
				t.Errorf("released %d more times", n)
			}
		})
	}
}
