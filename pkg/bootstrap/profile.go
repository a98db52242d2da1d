package bootstrap

import (
	"fmt"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/pkg/chain"
)

// Resource profiles (--profile). Each setting is measured in
// docs/PERFORMANCE.md ("Profiles").
const (
	// ProfileAuto picks small on hosts with at most smallHostMemory, else default.
	ProfileAuto = "auto"
	// ProfileDefault keeps upstream's API surface and limits.
	ProfileDefault = "default"
	// ProfileSmall is for 512 MB-1 GB boards: less memory, at a little start-up
	// time and without the OpenAPI v2 document.
	ProfileSmall = "small"
)

var profiles = []string{ProfileAuto, ProfileDefault, ProfileSmall}

// smallHostMemory is the most memory (total, or the cgroup limit) that auto
// treats as a small board: 1 GB boards report ~0.9 GiB, 2 GB boards ~1.8 GiB.
const smallHostMemory = 1536 << 20

// profile is what a resource profile sets.
type profile struct {
	Name string
	// GCPercent is GOGC unless the environment sets it.
	GCPercent int
	// BurstHeap is the heap goal the GC may allow while the server allocates
	// fast, and BurstRSSCeiling the resident memory that growth stops at
	// (internal/gcpacer); the GC percent returns to GCPercent when the burst
	// is over.
	BurstHeap, BurstRSSCeiling uint64
	// Chain tunes the API server.
	Chain chain.Tuning
	// ControllerWorkers caps the controller-manager's concurrent syncs per
	// controller (0: upstream's defaults).
	ControllerWorkers int32
	// LeanControllers turns off controllers an edge host can do without
	// (pkg/controllers: the ValidatingAdmissionPolicy status controller).
	LeanControllers bool
	// MaxConnections caps the API port's open connections (connlimit.go).
	MaxConnections int
}

// profileSettings returns the settings of a resolved profile name.
func profileSettings(name string) profile {
	switch name {
	case ProfileSmall:
		return profile{
			Name: ProfileSmall,
			// 25 instead of 50: another ~15 MiB off the idle heap for ~0.4 s
			// of start-up.
			GCPercent: 25,
			// Twice the idle live heap (~75 MiB), and never past 320 MiB:
			// under the 400 MiB the small profile may use under load
			// (docs/reliability/load.md).
			BurstHeap:       160 << 20,
			BurstRSSCeiling: 320 << 20,
			Chain: chain.Tuning{
				// kubectl since 1.27 reads OpenAPI v3 for apply, explain and
				// validation; the v2 document is ~25 MiB of heap.
				DisableOpenAPIV2: true,
				// Fewer requests in flight bound the memory a burst can take;
				// API Priority and Fairness still shares them out, so
				// controllers and kubectl are not starved by one client.
				MaxRequestsInFlight:         100,
				MaxMutatingRequestsInFlight: 50,
				// Events fill SD cards and the watch cache: keep them 30 min.
				EventTTL: 30 * time.Minute,
				// Four goroutines and a periodic datastore read fewer per
				// resource (chain.Tuning.LeanStorage).
				LeanStorage: true,
			},
			ControllerWorkers: 2,
			LeanControllers:   true,
			MaxConnections:    smallMaxConnections,
		}
	default:
		return profile{Name: ProfileDefault, GCPercent: defaultGCPercent, BurstHeap: defaultBurstHeap, BurstRSSCeiling: defaultBurstRSSCeiling, MaxConnections: defaultMaxConnections}
	}
}

// ResolveProfile turns a --profile value into a profile name; auto looks at
// the host's memory (0 = unknown, which counts as default).
func ResolveProfile(value string, hostMemory uint64) (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(value)); v {
	case "", ProfileAuto:
		if hostMemory > 0 && hostMemory <= smallHostMemory {
			return ProfileSmall, nil
		}
		return ProfileDefault, nil
	case ProfileDefault, ProfileSmall:
		return v, nil
	default:
		return "", fmt.Errorf("--profile %q is not one of: %s", value, strings.Join(profiles, ", "))
	}
}
