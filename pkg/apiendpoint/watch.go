package apiendpoint

import (
	"context"
	"net"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// The `kubernetes` Service's EndpointSlice, kept by the API servers' lease
// endpoint reconciler: one address per server that publishes one.
const (
	sliceNamespace = "default"
	sliceName      = "kubernetes"
)

// watchSlice follows the `kubernetes` EndpointSlice (by name: the only one
// the node's role lets it read, see rbac.go) until ctx ends.
func (e *Endpoint) watchSlice(ctx context.Context) error {
	client, err := kubeclient.New(e.cfg.Kubeconfig, "api-endpoint", kubeclient.Steady)
	if err != nil {
		return err
	}
	lw := cache.NewListWatchFromClient(client.DiscoveryV1().RESTClient(), "endpointslices", sliceNamespace,
		fields.OneTermEqualSelector("metadata.name", sliceName))
	inf := cache.NewSharedIndexInformer(lw, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	update := func(obj any) {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
			e.learn(ctx, sliceAddresses(s))
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
	}); err != nil {
		return err
	}
	inf.RunWithContext(ctx)
	return nil
}

// learn takes addrs as the servers known, unless it is empty (a slice with
// no server says nothing about where servers are: keep what is known).
func (e *Endpoint) learn(ctx context.Context, addrs []string) {
	if len(addrs) == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.setServersLocked(ctx, addrs) {
		logger.Info("API servers learned", "servers", e.order)
		e.saveLocked(logger)
	}
}

// sliceAddresses are host:port of every endpoint of s not known unready,
// on its https port.
func sliceAddresses(s *discoveryv1.EndpointSlice) []string {
	var port int32
	for _, p := range s.Ports {
		if p.Port != nil && (len(s.Ports) == 1 || (p.Name != nil && *p.Name == "https")) {
			port = *p.Port
		}
	}
	if port == 0 {
		return nil
	}
	var out []string
	for _, ep := range s.Endpoints {
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		for _, a := range ep.Addresses {
			out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
		}
	}
	return out
}
