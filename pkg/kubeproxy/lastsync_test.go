package kubeproxy

import (
	"sync/atomic"
	"testing"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	proxymetrics "k8s.io/kubernetes/pkg/proxy/metrics"
)

// countingCollector counts its collections, as the kubelet's log-stats
// collector (which asks the stats provider for every pod) would be run.
type countingCollector struct {
	metrics.BaseStableCollector
	desc  *metrics.Desc
	calls atomic.Int32
}

func (c *countingCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- c.desc }

func (c *countingCollector) CollectWithStability(ch chan<- metrics.Metric) {
	c.calls.Add(1)
	ch <- metrics.NewLazyConstMetric(c.desc, metrics.GaugeValue, 1)
}

// TestLastSyncReadsOneGauge: the readiness poll reads kube-proxy's last
// sync gauge and runs no other collector of the process's registry (the
// kubelet's collectors live there too, and its log-stats one logs an error
// line when it runs before cAdvisor has data).
func TestLastSyncReadsOneGauge(t *testing.T) {
	proxymetrics.RegisterMetrics(kubeproxyconfig.ProxyModeNFTables)
	other := &countingCollector{desc: metrics.NewDesc("edgeplane_test_other_collector", "a collector that is not kube-proxy's", nil, nil, metrics.ALPHA, "")}
	legacyregistry.CustomMustRegister(other)

	if got := lastSync(); got != 0 {
		t.Fatalf("lastSync before any sync = %v, want 0", got)
	}
	proxymetrics.SyncProxyRulesLastTimestamp.WithLabelValues("IPv4").Set(1700000000)
	if got := lastSync(); got != 1700000000 {
		t.Fatalf("lastSync after a sync = %v, want 1700000000", got)
	}
	if n := other.calls.Load(); n != 0 {
		t.Fatalf("lastSync ran another collector of the registry %d times", n)
	}
}
