package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/datastore"
)

// faultFull selects the long form of the reliability tests (figures for
// docs/reliability/faults.md).
func faultFull() bool { return os.Getenv("EDGEPLANE_RELIABILITY_FULL") == "1" }

var (
	faultEtcdOnce sync.Once
	faultEtcdBin  string
	faultEtcdErr  error
)

// faultBuildEtcd builds bench/cmd/etcd (upstream etcdmain) once per package
// run, next to the edgeplane binary TestMain built.
func faultBuildEtcd(t *testing.T) string {
	t.Helper()
	faultEtcdOnce.Do(func() {
		faultEtcdBin = filepath.Join(filepath.Dir(binary), "etcd")
		build := exec.Command("go", "build", "-o", faultEtcdBin, "../../bench/cmd/etcd")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			faultEtcdErr = fmt.Errorf("build bench/cmd/etcd: %v\n%s", err, out)
		}
	})
	if faultEtcdErr != nil {
		t.Fatal(faultEtcdErr)
	}
	return faultEtcdBin
}

// faultEtcd is a single-member etcd in its own process, client TLS with
// client-certificate authentication, on fixed loopback ports so that it can
// be restarted on the same data and address.
type faultEtcd struct {
	t       *testing.T
	bin     string
	dir     string
	client  string // https://127.0.0.1:PORT
	peer    string
	pki     *certs.PKI
	cmd     *exec.Cmd
	exited  chan struct{}
	output  *syncBuffer
	started int
}

func faultNewEtcd(t *testing.T, pki *certs.PKI) *faultEtcd {
	e := &faultEtcd{
		t: t, bin: faultBuildEtcd(t), dir: filepath.Join(t.TempDir(), "etcd"), pki: pki,
		client: "https://127.0.0.1:" + freePort(t), peer: "http://127.0.0.1:" + freePort(t),
		output: &syncBuffer{},
	}
	t.Cleanup(func() {
		e.signal(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("etcd output:\n%s", tail(e.output.String()))
		}
	})
	return e
}

// start runs etcd on e.dir and waits until a TLS client reads from it.
func (e *faultEtcd) start() {
	e.t.Helper()
	e.started++
	e.cmd = exec.Command(e.bin, "--name", "fault", "--data-dir", e.dir,
		"--listen-client-urls", e.client, "--advertise-client-urls", e.client,
		"--listen-peer-urls", e.peer, "--initial-advertise-peer-urls", e.peer,
		"--initial-cluster", "fault="+e.peer, "--log-level", "warn",
		"--cert-file", e.pki.EtcdServer.Cert, "--key-file", e.pki.EtcdServer.Key,
		"--trusted-ca-file", e.pki.EtcdCA.Cert, "--client-cert-auth")
	fmt.Fprintf(e.output, "--- start %d\n", e.started)
	e.cmd.Stdout, e.cmd.Stderr = e.output, e.output
	if err := e.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	exited := make(chan struct{})
	e.exited = exited
	go func(c *exec.Cmd) { _ = c.Wait(); close(exited) }(e.cmd)

	cli, err := datastore.NewClient(e.clientConfig(), logr.Discard())
	if err != nil {
		e.t.Fatal(err)
	}
	defer cli.Close()
	eventually(e.t, time.Minute, "etcd answering", func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			e.t.Fatalf("etcd exited:\n%s", tail(e.output.String()))
		default:
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "health")
		return err == nil, err
	})
}

func (e *faultEtcd) clientConfig() datastore.ClientConfig {
	return datastore.ClientConfig{Endpoints: []string{e.client}, CAFile: e.pki.EtcdCA.Cert,
		CertFile: e.pki.EtcdClient.Cert, KeyFile: e.pki.EtcdClient.Key}
}

func (e *faultEtcd) signal(sig syscall.Signal) {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	select {
	case <-e.exited:
		return
	default:
	}
	if sig == syscall.SIGKILL {
		_ = e.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies on SIGKILL too; be explicit
	}
	if err := e.cmd.Process.Signal(sig); err != nil {
		e.t.Logf("signal %v to etcd: %v", sig, err)
	}
	if sig == syscall.SIGKILL {
		<-e.exited
	}
}
