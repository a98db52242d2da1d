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
	// LeanStorage turns off the API server's per-resource background work
	// that a cluster of a few nodes does without: the feature gates of
	// leanStorageGates and the object count polling, about four goroutines
	// and a periodic count and full read of the datastore per resource.
	LeanStorage bool
}

// leanStorageGates are the feature gates LeanStorage turns off, each on by
// default in v1.37 and each one or two goroutines per resource of the ~63 a
// server stores.
var leanStorageGates = map[string]bool{
	// Each storage watch decodes its events in one goroutine instead of a
	// scheduler, a collector and one goroutine per event: the concurrency is
	// for the large objects of large clusters.
	"ConcurrentWatchObjectDecode": false,
	// The watch cache's consistency checker reads every resource in full
	// from the datastore every 5-7.5 minutes to compare it with the cache.
	"DetectCacheInconsistency": false,
	// API Priority and Fairness re-estimates each resource's object size
	// every minute to weigh LISTs. Without it and without the object counts
	// (CountMetricPollPeriod 0 below), every LIST takes the fewest seats: a
	// small cluster's LISTs are a few hundred objects at most.
	"SizeBasedListCostEstimate": false,
}

// featureGates returns the process-wide feature gates t sets (nil: none).
func (t Tuning) featureGates() map[string]bool {
	if t.LeanStorage {
		return leanStorageGates
	}
	return nil
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
	if t.LeanStorage {
		// The count of each resource, polled every minute (a COUNT over the
		// resource's keys in the datastore), feeds only LIST cost estimates
		// and the apiserver_resource_objects metric.
		s.Etcd.StorageConfig.CountMetricPollPeriod = 0
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
