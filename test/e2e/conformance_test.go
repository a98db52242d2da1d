package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/test/conformance"
)

// TestConformance runs the upstream [Conformance] suite (make conformance,
// docs/CONFORMANCE.md) on a two-node cluster of this harness: the server
// and an agent, each in a network namespace with its own containerd, whose
// registry mirror is a read-only registry of the images that
// test/conformance built. ginkgo and e2e.test run in the server's network
// namespace (nsenter --net: the mount namespace is the host's, as the
// kubelets' and containerds').
//
// EDGEPLANE_CONFORMANCE_DIR is the built cache (hack/conformance.sh builds
// it); EDGEPLANE_CONFORMANCE_DATASTORE is sqlite (default) or etcd;
// EDGEPLANE_CONFORMANCE_FOCUS narrows the run to the specs it matches;
// EDGEPLANE_CONFORMANCE_PHASES is "parallel,serial" (default) or one of them;
// EDGEPLANE_CONFORMANCE_RUN is the run's directory (default: a new one under
// DIR/runs), which a run of one phase shares with the other phase's run.
func TestConformance(t *testing.T) {
	dir := os.Getenv("EDGEPLANE_CONFORMANCE_DIR")
	if dir == "" {
		testenv.SkipByDesign(t, "conformance")
	}
	art := conformance.Paths(dir)
	for _, f := range []string{art.E2ETest, art.Ginkgo, art.Kubectl, art.ImagesDir} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("EDGEPLANE_CONFORMANCE_DIR=%s is not a complete build (%v): run hack/conformance.sh (make conformance)", dir, err)
		}
	}
	datastore := os.Getenv("EDGEPLANE_CONFORMANCE_DATASTORE")
	if datastore == "" {
		datastore = "sqlite"
	}
	if datastore != "sqlite" && datastore != "etcd" {
		t.Fatalf("EDGEPLANE_CONFORMANCE_DATASTORE=%q: want sqlite or etcd", datastore)
	}
	phases, err := conformancePhases(os.Getenv("EDGEPLANE_CONFORMANCE_PHASES"))
	if err != nil {
		t.Fatal(err)
	}

	reg, err := conformance.NewRegistry(art.ImagesDir)
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	c := startTwoNodeCluster(t, twoNodeOptions{
		ServerArgs:       append([]string{"--datastore", datastore}, conformanceNodeArgs...),
		AgentArgs:        conformanceNodeArgs,
		PerQoSCgroups:    true,
		RouteServiceCIDR: true,
		RegistryConfigDir: func(t *testing.T, hostIP string) string {
			l, err := reg.Serve(hostIP + ":0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			hosts := filepath.Join(t.TempDir(), "registries")
			if err := conformance.WriteHostsDir(hosts, l.Addr().String()); err != nil {
				t.Fatal(err)
			}
			return hosts
		},
	})
	t.Logf("two-node cluster (%s) up in %s", datastore, time.Since(begin).Round(time.Second))

	out := os.Getenv("EDGEPLANE_CONFORMANCE_RUN")
	if out == "" {
		out = filepath.Join(dir, "runs", datastore+"-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	suite := conformance.Suite{
		Artifacts:  art,
		Kubeconfig: c.Server.kubeconfig,
		OutDir:     out,
		Netns:      c.ServerNS,
		Focus:      os.Getenv("EDGEPLANE_CONFORMANCE_FOCUS"),
	}
	var results []conformance.Result
	for _, p := range phases {
		ctx, cancel := context.WithTimeout(context.Background(), p.Timeout+10*time.Minute)
		t.Logf("phase %s: ginkgo --procs=%d --label-filter=%q (log: %s)", p.Name, p.Procs, p.LabelFilter,
			filepath.Join(suite.PhaseDir(p), "ginkgo.log"))
		res, err := suite.Run(ctx, p)
		cancel()
		if err != nil {
			t.Errorf("%v", err)
		}
		results = append(results, res)
		t.Logf("phase %s: %d run, %d passed, %d failed, %d skipped in %s", p.Name, res.Total(), res.Passed, res.Failed,
			res.Skipped, res.Took.Round(time.Second))
	}
	title := fmt.Sprintf("Kubernetes %s [Conformance], edgeplane on %s, two nodes (%s)", conformance.KubernetesVersion, datastore,
		time.Now().UTC().Format("2006-01-02"))
	table := conformance.Table(title, results)
	if err := os.WriteFile(filepath.Join(out, "summary-"+strings.Join(names(results), "-")+".md"), []byte(table), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("results in %s:\n%s", out, table)
	for _, r := range results {
		if r.Failed > 0 {
			t.Errorf("phase %s: %d of %d specs failed (see the table above and %s)", r.Phase, r.Failed, r.Total(), out)
		}
	}
}

// conformanceNodeArgs are both nodes' flags for the suite, for these test
// machines' disks, which the kubelet sees more than 85% full (capacity less
// available: 252G less 29G on the run of docs/CONFORMANCE.md): its image garbage collection would remove
// every image no running container uses every five minutes, the sandbox
// image included (containerd 1.6 does not pin it), and each node's next
// pod would fail with "failed to get sandbox image"; and its default
// eviction thresholds (imagefs.available<15%) would take the nodes into
// DiskPressure. The disk thresholds are amounts, not shares: these machines'
// free space, shared with other work, fell to 1.9G of 252G (less than 1%)
// during an etcd run, and both nodes went into DiskPressure and refused
// every pod from then on. The sandbox image is upstream's pause, which the
// registry mirror serves, so that a node that loses it pulls it again.
var conformanceNodeArgs = []string{
	"--pause-image", conformance.ImagePause,
	"--kubelet-arg=image-gc-high-threshold=100",
	"--kubelet-arg=eviction-hard=memory.available<100Mi,nodefs.available<512Mi,imagefs.available<512Mi,nodefs.inodesFree<1%",
}

// conformancePhases picks conformance.Phases by name ("" is all of them).
func conformancePhases(names string) ([]conformance.Phase, error) {
	if names == "" {
		return conformance.Phases, nil
	}
	var out []conformance.Phase
	for _, n := range strings.Split(names, ",") {
		found := false
		for _, p := range conformance.Phases {
			if p.Name == strings.TrimSpace(n) {
				out = append(out, p)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("EDGEPLANE_CONFORMANCE_PHASES: no phase %q (parallel, serial)", n)
		}
	}
	return out, nil
}

// names are the results' phase names.
func names(results []conformance.Result) []string {
	var out []string
	for _, r := range results {
		out = append(out, r.Phase)
	}
	return out
}
