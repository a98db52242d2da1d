package node

import (
	"context"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/component"
)

// fakePart is a part whose Ready returns at once, or waits for ctx.
type fakePart struct {
	name  string
	ready bool
}

func (p fakePart) Name() string                { return p.name }
func (p fakePart) Start(context.Context) error { return nil }
func (p fakePart) Stop(context.Context) error  { return nil }
func (p fakePart) Ready(ctx context.Context) error {
	if p.ready {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestLocalReady: a node that started offline is running once the parts
// up to its kubelet are ready, whatever the parts that need the API do.
func TestLocalReady(t *testing.T) {
	endpoint, images := fakePart{PartAPIEndpoint, true}, fakePart{"images", true}
	for _, tc := range []struct {
		name  string
		parts []component.Component
		ok    bool
	}{
		{"kubelet runs, the pod network waits for the API", []component.Component{endpoint, images, fakePart{PartKubelet, true}, fakePart{PartFlannel, false}}, true},
		{"kubelet not running", []component.Component{endpoint, images, fakePart{PartKubelet, false}, fakePart{PartFlannel, true}}, false},
		{"not started", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			n := &Node{parts: tc.parts}
			if err := n.LocalReady(ctx); (err == nil) != tc.ok {
				t.Errorf("LocalReady: %v, want ready %v", err, tc.ok)
			}
		})
	}
}
