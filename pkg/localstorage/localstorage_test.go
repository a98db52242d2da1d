package localstorage

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestVolumeDir: a node makes and removes only a directory in the shape
// this package gives a volume (absolute, clean, named after the volume and
// its claim): a volume pointing at / or at another directory, edited by
// hand or not ours, is never removed.
func TestVolumeDir(t *testing.T) {
	pv := testVolume("pvc-1", "n1")
	want := "/var/lib/edgeplane/storage/pvc-1_default_c-pvc-1"
	if got, ok := volumeDir(pv); !ok || got != want {
		t.Fatalf("volumeDir = %q, %v; want %q", got, ok, want)
	}
	for _, path := range []string{"/", "/etc", "/var/lib/edgeplane/storage", "relative/pvc-1_default_c-pvc-1",
		"/x/../pvc-1_default_c-pvc-1/", "/x/pvc-2_default_c-pvc-1", "/x/pvc-1_other_c-pvc-1"} {
		bad := pv.DeepCopy()
		bad.Spec.Local.Path = path
		if got, ok := volumeDir(bad); ok {
			t.Errorf("path %q accepted as %q", path, got)
		}
	}
	hostPath := pv.DeepCopy()
	hostPath.Spec.Local = nil
	hostPath.Spec.HostPath = &corev1.HostPathVolumeSource{Path: want}
	if _, ok := volumeDir(hostPath); ok {
		t.Error("a hostPath volume accepted")
	}
}
