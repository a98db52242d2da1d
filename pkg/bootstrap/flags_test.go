package bootstrap

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// validateArgs parses args after a data dir and an advertise address into
// new Options, completes them and returns them with Validate's problems.
func validateArgs(t *testing.T, args []string) (CompletedOptions, []error) {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(append([]string{"--data-dir", t.TempDir(), "--advertise-address", "192.0.2.1"}, args...)); err != nil {
		t.Fatal(err)
	}
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	return c, c.Validate()
}

// wantOneProblem fails t unless errs is one problem containing want.
func wantOneProblem(t *testing.T, errs []error, want string) {
	t.Helper()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
		t.Fatalf("problems %v; want one containing %q", errs, want)
	}
}
