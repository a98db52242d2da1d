package chain

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/component-base/compatibility"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// childEnv marks the copy of the test binary that
// TestRegisterComponentGlobalsKeepsError runs: the settings it applies are
// process-wide and applied once, so they are tried in a process of their own.
const childEnv = "EDGEPLANE_CHAIN_TEST_CHILD"

// TestRegisterComponentGlobalsKeepsError: when applying the process-wide
// settings fails, every later call reports the failure too, not only the
// first (it used to return nil from the second call on).
func TestRegisterComponentGlobalsKeepsError(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		registerTwice(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRegisterComponentGlobalsKeepsError$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child test failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "both calls failed") {
		t.Fatalf("child test did not run its checks:\n%s", out)
	}
}

func registerTwice(t *testing.T) {
	opts := options.NewServerRunOptions()
	// A registry of its own that names a component nobody registered:
	// Set fails.
	registry := compatibility.NewComponentGlobalsRegistry()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	registry.AddFlags(fs)
	if err := fs.Parse([]string{"--emulated-version=nosuchcomponent=1.30"}); err != nil {
		t.Fatal(err)
	}
	opts.GenericServerRunOptions.ComponentGlobalsRegistry = registry

	first := registerComponentGlobals(opts, nil)
	if first == nil {
		t.Fatal("first call: want an error for an unregistered component's emulated version")
	}
	second := registerComponentGlobals(opts, nil)
	if second == nil {
		t.Fatalf("second call returned nil after the first failed with: %v", first)
	}
	if second.Error() != first.Error() {
		t.Fatalf("second call's error %q differs from the first's %q", second, first)
	}
	t.Logf("both calls failed: %v", first)
}
