package kubectli18n

import (
	"testing"

	"k8s.io/kubectl/pkg/util/i18n"
)

func TestRunsKubectl(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"/usr/local/bin/edgeplane", "server"}, false},
		{[]string{"edgeplane"}, false},
		{[]string{"/usr/local/bin/edgeplane", "kubectl", "get", "pods"}, true},
		{[]string{"/usr/local/bin/kubectl", "get", "pods"}, true},
	} {
		if got := RunsKubectl(tc.args); got != tc.want {
			t.Errorf("RunsKubectl(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestNoCatalog: outside kubectl, T answers with its English text without a
// catalog, as the help texts read with one.
func TestNoCatalog(t *testing.T) {
	const text = "Print the list of flags inherited by all commands"
	if got := i18n.T(text); got != text {
		t.Errorf("T(%q) = %q", text, got)
	}
	if err := i18n.SetLoadTranslationsFunc(load); err == nil {
		t.Errorf("translations were not marked loaded after the first T")
	}
}
