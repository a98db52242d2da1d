package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
)

// serverWatches are the most watches, per resource, a control-plane-only
// server (--disable=kubelet) holds open on its own API server once started:
// the API server's own informers (the Node authorizer, admission) one each,
// the controller-manager one each of what it reads, the scheduler its own
// non-terminal Pods, the taint-eviction controller its own trimmed Nodes and
// Pods (autonomy.go), the ingress controller its own stripped Services as its
// own user. The scheduler's other types and the root-ca-cert-publisher's
// Namespaces (controllers.termInformers) and
// edgeplane's other controllers in the server process (servicelb, the node
// tunnel, the CSR approver, the local storage provisioner) read the API
// server's informers and add none (chain.Server.Informers).
var serverWatches = map[string]int{
	"nodes":                  3,
	"services":               2,
	"persistentvolumeclaims": 2,
	"storageclasses":         2,
	"persistentvolumes":      2,
	"namespaces":             2,
	"csidrivers":             2,
	"volumeattachments":      2,
	"resourceclaims":         2,
	"resourceslices":         2,
	"deviceclasses":          2,
	"pods":                   4,
}

// TestServerControllersShareInformers starts a server in this process and
// counts, from its API server's apiserver_longrunning_requests, the watches
// of each resource in serverWatches: a controller of the server (the
// scheduler among them) that lists and watches them itself again fails it.
func TestServerControllersShareInformers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole server")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, errs := validateArgs(t, []string{"--bind-address", "127.0.0.1", "--https-port", "0",
		"--profile", "small", "--disable", "kubelet"})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	s, err := start(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.shutdown(context.WithoutCancel(ctx), nil); err != nil {
			t.Error(err)
		}
	})
	client, err := s.adminClient("shared-informers-test")
	if err != nil {
		t.Fatal(err)
	}
	// Every component has started, but those start-up does not wait for
	// (the CSR approver among them) may open their watches just after: the
	// counts are read for 5 s, and one above its most ends the wait.
	var got map[string]int
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		if got, err = watchesByResource(ctx, client); err != nil {
			return false, err
		}
		for r, most := range serverWatches {
			if got[r] > most {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatal(err)
	}
	for r, most := range serverWatches {
		if got[r] > most {
			t.Errorf("%d watches of %s, want at most %d: a controller in the server process lists and watches them itself instead of reading the API server's informers", got[r], r, most)
		} else {
			t.Logf("%d watches of %s (at most %d)", got[r], r, most)
		}
	}
}

// watchesByResource sums apiserver_longrunning_requests of verb WATCH per
// resource from the API server's /metrics.
func watchesByResource(ctx context.Context, client kubernetes.Interface) (map[string]int, error) {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		labels, value, ok := strings.Cut(line, "} ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %w", line, err)
		}
		_, rest, ok := strings.Cut(labels, `resource="`)
		if !ok {
			continue
		}
		resource, _, _ := strings.Cut(rest, `"`)
		out[resource] += int(n)
	}
	return out, sc.Err()
}
