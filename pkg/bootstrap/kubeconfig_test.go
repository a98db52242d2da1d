package bootstrap

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// TestCopyKubeconfigConcurrent: start-up and the certificate renewer both
// copy the admin kubeconfig to --write-kubeconfig, possibly at once, while
// the renewer rewrites the source. Every copy succeeds, the copy ends as the
// source's last content with the asked mode, and no temp file is left. (Both
// used to write <dst>.tmp: one's rename found the other's temp file gone.)
func TestCopyKubeconfigConcurrent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		writers int
		copies  int
		mode    os.FileMode
	}{
		{"two writers", 2, 200, 0o600},
		{"four writers, group-readable", 4, 100, 0o640},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "admin.kubeconfig")
			dst := filepath.Join(dir, "user", "kubeconfig")
			write := func(i int) {
				if _, err := atomicfile.Write(src, []byte(fmt.Sprintf("kubeconfig %d\n", i)), 0o600); err != nil {
					t.Error(err)
				}
			}
			write(0)
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				errs []error
			)
			for w := 0; w < tc.writers; w++ {
				wg.Go(func() {
					for i := 0; i < tc.copies; i++ {
						if err := copyKubeconfig(src, dst, tc.mode); err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
					}
				})
			}
			wg.Go(func() { // the renewer rewriting the source meanwhile
				for i := 1; i <= tc.copies; i++ {
					write(i)
				}
			})
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("%d of %d copies failed, the first: %v", len(errs), tc.writers*tc.copies, errs[0])
			}
			k := &kubeconfigCopy{src: src, dst: dst, mode: tc.mode}
			if err := k.write(); err != nil { // the last writer, once both are done
				t.Fatal(err)
			}
			got, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("kubeconfig %d\n", tc.copies); string(got) != want {
				t.Errorf("copy holds %q, want %q", got, want)
			}
			fi, err := os.Stat(dst)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != tc.mode {
				t.Errorf("copy has mode %v, want %v", fi.Mode().Perm(), tc.mode)
			}
			left, err := os.ReadDir(filepath.Dir(dst))
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 1 {
				names := []string{}
				for _, e := range left {
					names = append(names, e.Name())
				}
				t.Errorf("files next to the copy: %v, want only %s", names, filepath.Base(dst))
			}
		})
	}
}
