// Command leasecost measures what one node Lease renewal costs on disk: it
// creates a Lease in kube-node-lease, renews it as a kubelet does (every
// 10 s by default), and divides what the server process wrote
// (/proc/<pid>/io write_bytes) by the renewals. The server must be
// otherwise idle; run it once with -dry (same waits, no renewals) for the
// background. Every loop is bounded by -n.
//
//	go run ./bench/cmd/leasecost -kubeconfig KC -pid PID [-n 30] [-every 10s] [-dry]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig of the server")
	pid := flag.Int("pid", 0, "the server's process id (its write_bytes are counted)")
	n := flag.Int("n", 30, "renewals")
	every := flag.Duration("every", 10*time.Second, "time between renewals (the kubelet's: 10 s)")
	settle := flag.Duration("settle", 40*time.Second, "wait after the Lease's creation before counting")
	flush := flag.Duration("flush", 35*time.Second, "wait after the last renewal, so that the kernel's writeback (30 s expiry) is counted")
	dry := flag.Bool("dry", false, "wait the same, renew nothing: the server's background writes")
	flag.Parse()
	if err := run(*kubeconfig, *pid, *n, *every, *settle, *flush, *dry); err != nil {
		fmt.Fprintln(os.Stderr, "leasecost:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, pid, n int, every, settle, flush time.Duration, dry bool) error {
	if kubeconfig == "" || pid <= 0 || n <= 0 {
		return errors.New("need -kubeconfig, -pid and -n > 0")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	leases := cs.CoordinationV1().Leases("kube-node-lease")
	name := fmt.Sprintf("leasecost-%d", os.Getpid())
	l, err := leases.Create(ctx, &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer func() { _ = leases.Delete(context.Background(), name, metav1.DeleteOptions{}) }()
	time.Sleep(settle)
	before, err := writeBytes(pid)
	if err != nil {
		return err
	}
	began := time.Now()
	for range n {
		time.Sleep(every)
		if dry {
			continue
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	time.Sleep(flush)
	after, err := writeBytes(pid)
	if err != nil {
		return err
	}
	took := time.Since(began)
	what := "renewals"
	if dry {
		what = "waits without a renewal"
	}
	fmt.Printf("%d %s in %s: %d bytes written, %.1f KB each, %.2f MB/h\n", n, what, took.Round(time.Second),
		after-before, float64(after-before)/float64(n)/1e3, float64(after-before)/took.Hours()/1e6)
	return nil
}

// writeBytes is write_bytes of /proc/<pid>/io: bytes the process caused to be
// written to storage (a page counts when it turns dirty).
func writeBytes(pid int) (int64, error) {
	io, err := procfs.ReadIO(pid)
	return io.WriteBytes, err
}
