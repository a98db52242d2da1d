package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/util/certificate/csr"
)

// nodeIdentity: an agent keeps its name because it holds its identity
// key, and nobody else gets it with a node token:
//   - restarted, it starts from its credentials;
//   - with its client certificate gone (expired and cleared) but its
//     identity key kept, it joins again with the token and is let in;
//   - an impostor with the same name and a valid token (a fresh data dir:
//     another key) is refused with the fix in the message, and so is one
//     that names the server's own node;
//   - a stray agent on the server's data dir writes nothing there;
//   - reinstalled from scratch (a new key) it is refused until an admin
//     runs `edgeplane node forget`, then joins.
func nodeIdentity(t *testing.T, c *twoNodeCluster) {
	agentDir := flagValue(t, c.agentArgs, "--data-dir")
	nodeDir := filepath.Join(agentDir, "agent")

	t.Run("a restart starts from its credentials", func(t *testing.T) {
		c.restartAgent(t)
		waitAgentReady(t, c.Agent)
		wantText(t, c.Agent.output.String(), "Starting with the node's existing credentials")
	})

	t.Run("it renews its client certificate itself", func(t *testing.T) {
		// As the kubelet's rotation does: a new key, a request as itself.
		client := clientFromKubeconfig(t, filepath.Join(nodeDir, "kubelet.kubeconfig"))
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "system:node:" + c.AgentNode, Organization: []string{"system:nodes"}}}, key)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		name, uid, err := csr.RequestCertificateWithContext(ctx, client, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), "",
			certificatesv1.KubeAPIServerClientKubeletSignerName, nil,
			[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}, key)
		if err != nil {
			t.Fatal(err)
		}
		certPEM, err := csr.WaitForCertificate(ctx, client, name, uid)
		if err != nil {
			t.Fatalf("the node's own renewal request %s: %v", name, err)
		}
		block, _ := pem.Decode(certPEM)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil || cert.Subject.CommonName != "system:node:"+c.AgentNode {
			t.Fatalf("renewed certificate %v, %v", cert.Subject, err)
		}
	})

	t.Run("its certificate gone, its identity key joins again", func(t *testing.T) {
		c.Agent.stop(t)
		for _, p := range []string{filepath.Join(nodeDir, "kubelet.kubeconfig"), filepath.Join(nodeDir, "kubelet", "pki")} {
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
		}
		c.Agent = c.startAgent(t)
		waitAgentReady(t, c.Agent)
		wantText(t, c.Agent.output.String(), "The node has its client certificate")
		waitNodeReady(t, c.Server, c.AgentNode)
	})

	// impostor runs an agent with a fresh data dir (so another identity
	// key) in the agent's namespace as node name, with the node token.
	impostor := func(t *testing.T, name string) string {
		args := replaceFlag(replaceFlag(c.agentArgs, "--data-dir", agentDataDir(t)), "--node-name", name)
		a := startAgentCmd(t, nsenterCmd(c.AgentNS, args...))
		return a.waitExit(t, 2*time.Minute)
	}
	t.Run("an impostor with its name and a valid token is refused", func(t *testing.T) {
		out := impostor(t, c.AgentNode)
		wantText(t, out, "edgeplane node forget "+c.AgentNode)
		waitNodeReady(t, c.Server, c.AgentNode)
	})
	t.Run("an impostor with the server's node name is refused", func(t *testing.T) {
		out := impostor(t, c.ServerNode)
		wantText(t, out, "did not issue the node's client certificate")
	})

	t.Run("a stray agent on the server's data dir writes nothing", func(t *testing.T) {
		serverNode := filepath.Join(c.Server.dataDir, "agent")
		before := dirDigest(t, serverNode)
		args := replaceFlag(replaceFlag(c.agentArgs, "--data-dir", c.Server.dataDir), "--node-name", "stray")
		a := startAgentCmd(t, nsenterCmd(c.ServerNS, args...))
		wantText(t, a.waitExit(t, time.Minute), "is in use by another edgeplane server")
		if after := dirDigest(t, serverNode); after != before {
			t.Errorf("the server's node directory changed under a stray agent:\nbefore\n%s\nafter\n%s", before, after)
		}
	})

	t.Run("reinstalled, it is let in after node forget", func(t *testing.T) {
		c.Agent.stop(t)
		// A reinstall: every credential and the identity key are gone (the
		// kubelet's pod directories may stay; they hold no credential).
		for _, f := range []string{"node-identity.key", "node-identity.bound", "kubelet.kubeconfig", "server-ca.crt", "client-ca.crt", "kubelet/pki"} {
			if err := os.RemoveAll(filepath.Join(nodeDir, f)); err != nil {
				t.Fatal(err)
			}
		}
		c.Agent = c.startAgent(t)
		wantText(t, c.Agent.waitExit(t, 2*time.Minute), "edgeplane node forget "+c.AgentNode)

		c.serverCLI(t, "node", "forget", c.AgentNode, "--data-dir", c.Server.dataDir)
		c.Agent = c.startAgent(t)
		waitAgentReady(t, c.Agent)
		waitNodeReady(t, c.Server, c.AgentNode)
	})
}

// serverCLI runs an edgeplane command in the server's namespace (its admin
// kubeconfig names loopback) and fails t unless it exits 0.
func (c *twoNodeCluster) serverCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := nsenterCmd(c.ServerNS, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("edgeplane %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitAgentReady waits for the agent's ready line.
func waitAgentReady(t *testing.T, a *agentProc) {
	t.Helper()
	eventually(t, 3*time.Minute, "the agent's ready line", func(ctx context.Context) (bool, error) {
		select {
		case <-a.exited:
			t.Fatalf("agent exited: %v\n%s", a.err, tail(a.output.String()))
		default:
		}
		return strings.Contains(a.output.String(), "edgeplane agent ready"), nil
	})
}

// flagValue is the value after flag in args.
func flagValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("%s not in %v", flag, args)
	return ""
}

// replaceFlag is args with flag's value replaced by value.
func replaceFlag(args []string, flag, value string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == flag && i+1 < len(out) {
			out[i+1] = value
		}
	}
	return out
}

// dirDigest lists the entries of dir (not below it: the kubelet's running
// state changes there) with their modes and a digest of each file's
// content, one line each.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		sum := ""
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.Sum256(data)
			sum = hex.EncodeToString(h[:8])
		}
		b.WriteString(e.Name() + " " + info.Mode().String() + " " + sum + "\n")
	}
	return b.String()
}
