package certs

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var expirationDesc = metrics.NewDesc("edgeplane_certificate_expiration_seconds",
	"Seconds until the certificate expires (negative once it has expired), by certificate name as `edgeplane certs check` lists it.",
	[]string{"name"}, nil, metrics.ALPHA, "")

// expirationCollector reads the certificates at scrape time, so the value is
// right even after `edgeplane certs rotate` changed the files.
type expirationCollector struct {
	metrics.BaseStableCollector
	pki *PKI
	now func() time.Time
}

var _ metrics.StableCollector = (*expirationCollector)(nil)

func (c *expirationCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- expirationDesc }

func (c *expirationCollector) CollectWithStability(ch chan<- metrics.Metric) {
	now := c.now()
	for _, info := range Inspect(c.pki) {
		if info.Err != nil {
			continue
		}
		ch <- metrics.NewLazyConstMetric(expirationDesc, metrics.GaugeValue, info.NotAfter.Sub(now).Seconds(), info.Name)
	}
}

var registerOnce sync.Once

// RegisterExpirationMetric adds edgeplane_certificate_expiration_seconds for
// the certificates of p to the legacy registry, which the API server serves
// on /metrics. Only the first call in a process registers.
func RegisterExpirationMetric(p *PKI) {
	registerOnce.Do(func() {
		legacyregistry.CustomMustRegister(&expirationCollector{pki: p, now: time.Now})
	})
}
