package resourcemetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/transport"
)

// defaultKubeletPort is the kubelet's port when a Node does not say
// (status.daemonEndpoints.kubeletEndpoint.port).
const defaultKubeletPort = 10250

// maxConcurrentScrapes bounds how many kubelets are read at once.
const maxConcurrentScrapes = 8

// scraper reads kubelets' /metrics/resource over TLS: it verifies each
// kubelet's serving certificate against the kubelet-serving CA bundle and
// presents the API server's kubelet client certificate; both files are
// read again when they change (client-go's transport reloads them).
type scraper struct {
	client       *http.Client
	addressTypes []corev1.NodeAddressType
	timeout      time.Duration
}

func newScraper(o Options, timeout time.Duration) (*scraper, error) {
	tc := &transport.Config{TLS: transport.TLSConfig{
		CAFile:         o.KubeletCAFile,
		CertFile:       o.KubeletClientCertFile,
		KeyFile:        o.KubeletClientKeyFile,
		ReloadTLSFiles: true,
		ReloadCAFiles:  true,
	}}
	if o.Dial != nil {
		tc.DialHolder = &transport.DialHolder{Dial: o.Dial}
	}
	rt, err := transport.New(tc)
	if err != nil {
		return nil, fmt.Errorf("metrics-server: kubelet client: %w", err)
	}
	return &scraper{
		// No redirects: a kubelet's answer comes from the kubelet.
		client: &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		addressTypes: o.AddressTypes,
		timeout:      timeout,
	}, nil
}

// url is where node's kubelet serves its resource metrics: its first
// address of the preferred types, and its port.
func (sc *scraper) url(node *corev1.Node) (string, error) {
	var host string
find:
	for _, t := range sc.addressTypes {
		for _, a := range node.Status.Addresses {
			if a.Type == t && a.Address != "" {
				host = a.Address
				break find
			}
		}
	}
	if host == "" {
		return "", fmt.Errorf("node has no address of the types %v", sc.addressTypes)
	}
	port := int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	if port <= 0 {
		port = defaultKubeletPort
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/metrics/resource", nil
}

// scrape reads node's kubelet.
func (sc *scraper) scrape(ctx context.Context, node *corev1.Node) (*batch, error) {
	url, err := sc.url(node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, sc.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	now := time.Now()
	resp, err := sc.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return nil, fmt.Errorf("GET %s: %s: %q", url, resp.Status, body)
	}
	b, err := decode(resp.Body, node.Name, now)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return b, nil
}

// podsNode says on which node a pod runs (false: no such pod).
type podsNode func(types.NamespacedName) (string, bool)

// scrapeAll reads every node's kubelet, at most maxConcurrentScrapes at a
// time, and merges what they said. A kubelet speaks for its own node and
// for the pods bound to it: figures it gives for any other pod are dropped,
// so that one node cannot skew another's pods (and their autoscaling).
// errs holds each node that could not be read, with why.
func (sc *scraper) scrapeAll(ctx context.Context, nodes []*corev1.Node, nodeOf podsNode) (merged *batch, errs map[string]error) {
	merged, errs = newBatch(), map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxConcurrentScrapes)
	for _, node := range nodes {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			b, err := sc.scrape(ctx, node)
			<-sem
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[node.Name] = err
				return
			}
			if p, ok := b.nodes[node.Name]; ok {
				merged.nodes[node.Name] = p
			} else {
				errs[node.Name] = errIncomplete
			}
			for ref, pp := range b.pods {
				if on, ok := nodeOf(ref); ok && on == node.Name {
					merged.pods[ref] = pp
				}
			}
		})
	}
	wg.Wait()
	return merged, errs
}

// errIncomplete is a kubelet's answer without the node's own figures.
var errIncomplete = errors.New("the kubelet's answer lacks the node's CPU or memory figure")
