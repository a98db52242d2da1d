package controllers

import (
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	cmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func TestCredentialsConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *rest.Config
	}{
		{"upstream client settings", &rest.Config{Host: "https://127.0.0.1:6443", UserAgent: "edgeplane/kube-controller-manager", QPS: clientQPS, Burst: clientBurst}},
		{"own rate limiter replaced", &rest.Config{Host: "https://127.0.0.1:1", QPS: 5, Burst: 10, RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := *tc.in
			got := credentialsConfig(tc.in)
			if got.QPS != clientQPS || got.Burst != credentialsBurst || got.RateLimiter != nil {
				t.Errorf("QPS %v, burst %d, rate limiter %v; want %v, %d, nil", got.QPS, got.Burst, got.RateLimiter, float32(clientQPS), credentialsBurst)
			}
			if got.Host != tc.in.Host || got.UserAgent != tc.in.UserAgent {
				t.Errorf("host %q, user agent %q; want %q, %q", got.Host, got.UserAgent, tc.in.Host, tc.in.UserAgent)
			}
			if tc.in.QPS != before.QPS || tc.in.Burst != before.Burst || tc.in.RateLimiter != before.RateLimiter {
				t.Errorf("input changed: QPS %v, burst %d", tc.in.QPS, tc.in.Burst)
			}
		})
	}
}

// TestCredentialsBurstCoversFirstStart: a first start costs up to five
// requests per controller (three to create its service account, two for its
// first token); the burst must cover every controller upstream knows.
func TestCredentialsBurstCoversFirstStart(t *testing.T) {
	n := len(cmapp.KnownControllers())
	if need := 5 * n; credentialsBurst < need {
		t.Errorf("credentialsBurst %d < %d (5 requests x %d known controllers)", credentialsBurst, need, n)
	}
	t.Logf("%d known controllers", n)
}
