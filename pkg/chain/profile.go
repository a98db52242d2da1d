package chain

import (
	"time"

	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// Tuning holds the resource-profile settings of the API server; the zero
// value keeps upstream's defaults.
type Tuning struct {
	// DisableOpenAPIV2 serves only OpenAPI v3 (/openapi/v3), which kubectl has
	// used since 1.27 for apply, explain and validation. The v2 document and
	// its aggregation are the largest single item of the idle heap.
	DisableOpenAPIV2 bool
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight are the API server's
	// concurrency limits; with API Priority and Fairness they are the total
	// seats shared among priority levels.
	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int
	// EventTTL is how long Events are kept.
	EventTTL time.Duration
}

// applyTuningOptions sets the option fields of t that are not zero.
func applyTuningOptions(s *options.ServerRunOptions, t Tuning) {
	if t.MaxRequestsInFlight > 0 {
		s.GenericServerRunOptions.MaxRequestsInFlight = t.MaxRequestsInFlight
	}
	if t.MaxMutatingRequestsInFlight > 0 {
		s.GenericServerRunOptions.MaxMutatingRequestsInFlight = t.MaxMutatingRequestsInFlight
	}
	if t.EventTTL > 0 {
		s.EventTTL = t.EventTTL
	}
}

// applyTuningConfig changes the built configuration of the three servers.
func applyTuningConfig(config *app.Config, t Tuning) {
	if t.DisableOpenAPIV2 {
		// Each server's generic config is a copy of the kube-apiserver's, so
		// each needs its own nil; authentication has already added its
		// security definitions to the v3 config, which stays.
		config.KubeAPIs.ControlPlane.Generic.OpenAPIConfig = nil
		config.ApiExtensions.GenericConfig.OpenAPIConfig = nil
		config.Aggregator.GenericConfig.OpenAPIConfig = nil
	}
}
