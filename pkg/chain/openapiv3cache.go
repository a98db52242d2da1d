package chain

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// The /openapi/v3 discovery lists every group-version's document with the
// hash of that document's JSON, so answering it means building and encoding
// all ~60 documents: 0.3 s of CPU, and the aggregator asks for it inside
// PrepareRun, so every start would wait for it before /readyz could pass
// (docs/PERFORMANCE.md, "Start-up"). The documents are a function of the
// binary, the group-versions' routes and the feature gates, so the discovery
// is kept in the state dir under a key made of exactly those, and a restart
// of the same binary with the same API reads it back. Any other start (an
// upgrade, --runtime-config, a feature gate) builds it again and replaces the
// file; the file is written only then, not at every start.
const openAPIV3DiscoveryFile = "openapi-v3-discovery.json"

type cachedDiscovery struct {
	Key  string          `json:"key"`
	Body json.RawMessage `json:"body"`
}

// discoveryKey identifies what the discovery was computed from; empty when
// the binary's build ID cannot be read (then nothing is cached).
func (l *lazyOpenAPIV3) discoveryKey() string {
	id, err := executableBuildID()
	if err != nil {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "build %x\n", id)
	if info := l.config.Info; info != nil {
		fmt.Fprintf(h, "info %q %q\n", info.Title, info.Version)
	}
	gvs := make([]string, 0, len(l.byGV))
	for gv := range l.byGV {
		gvs = append(gvs, gv)
	}
	sort.Strings(gvs)
	for _, gv := range gvs {
		fmt.Fprintf(h, "gv %s\n", gv)
		for _, r := range l.byGV[gv].Routes() {
			fmt.Fprintf(h, "route %s %s %s\n", r.Method, r.Path, r.Operation)
		}
	}
	gates := utilfeature.DefaultMutableFeatureGate.GetAll()
	names := make([]string, 0, len(gates))
	for name := range gates {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(h, "gate %s %t\n", name, utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(name)))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// executableBuildID is the Go build ID note of the running binary, which
// changes whenever anything that went into the binary does. It reads
// /proc/self/exe, the file this process runs even after an upgrade
// replaced the one at its path.
func executableBuildID() ([]byte, error) {
	const exe = "/proc/self/exe"
	f, err := elf.Open(exe)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return nil, fmt.Errorf("%s has no Go build ID", exe)
	}
	return s.Data()
}

// loadDiscovery returns the kept discovery when it was made under key.
func loadDiscovery(path, key string) ([]byte, bool) {
	if path == "" || key == "" {
		return nil, false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	var c cachedDiscovery
	if json.Unmarshal(data, &c) != nil || c.Key != key || len(c.Body) == 0 {
		return nil, false
	}
	return c.Body, true
}

// storeDiscovery keeps body under key; a failure only costs the next start
// the time to compute it again.
func storeDiscovery(path, key string, body []byte) {
	if path == "" || key == "" {
		return
	}
	data, err := json.Marshal(cachedDiscovery{Key: key, Body: body})
	if err == nil {
		_, err = atomicfile.Write(path, data, 0o600)
	}
	if err != nil {
		klog.Background().V(2).Info("Not keeping the OpenAPI v3 discovery", "file", path, "err", err)
	}
}
