package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNodeBehindNAT: an agent whose namespace drops every new connection
// from the server (as NAT or a firewall between them would; the agent
// still reaches the server) is Ready, and `kubectl logs`, `exec` and
// `port-forward` of its pod work, and `kubectl top node` has its figures
// (the metrics scrape), through the tunnel the agent opens to the server
// (pkg/nodetunnel, --node-tunnel=auto, the default). The
// controls: the server's namespace cannot open a connection to the
// agent's kubelet, and the same agent restarted with --node-tunnel=off
// serves neither logs nor exec.
func TestNodeBehindNAT(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two containerds, a server node and an agent node in network namespaces")
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{BeforeAgent: dropFromServer})

	t.Run("the server cannot dial the agent's kubelet", func(t *testing.T) {
		kubelet := c.AgentIP + ":10250"
		for _, a := range c.agentArgs {
			if p, ok := strings.CutPrefix(a, "--kubelet-arg=port="); ok {
				kubelet = c.AgentIP + ":" + p
			}
		}
		if err := dialFrom(c.ServerNS, kubelet); err == nil {
			t.Fatalf("the server's namespace opened a connection to %s: the drop rule does not hold", kubelet)
		}
	})

	// portForward fetches "served" from port 8080.
	c.runPod(t, "nat", c.AgentNode, "echo hello from behind NAT; mkdir -p /www; echo served > /www/index.html; exec httpd -f -p 8080 -h /www", nil)
	t.Run("logs", func(t *testing.T) {
		out, err := c.kubectl("logs", "nat")
		if err != nil || !strings.Contains(out, "hello from behind NAT") {
			t.Fatalf("kubectl logs nat = %q, %v", out, err)
		}
	})
	t.Run("exec", func(t *testing.T) {
		if out, err := c.podExec("nat", "hostname"); err != nil || strings.TrimSpace(out) != "nat" {
			t.Fatalf("kubectl exec nat -- hostname = %q, %v", out, err)
		}
	})
	t.Run("port-forward", func(t *testing.T) { portForward(t, c.Server, "nat") })
	t.Run("metrics: kubectl top node", func(t *testing.T) {
		eventually(t, 2*time.Minute, "kubectl top node "+c.AgentNode, func(context.Context) (bool, error) {
			out, err := topTable("kubectl", "--kubeconfig", c.Server.kubeconfig, "top", "node", c.AgentNode)
			if err != nil {
				return false, err
			}
			rows, err := topRows(out)
			if err != nil {
				return false, err
			}
			r, ok := rows[c.AgentNode]
			return ok && !r[1].IsZero(), fmt.Errorf("no figures for %s in:\n%s", c.AgentNode, out)
		})
	})
	t.Run("the server says the tunnel carries it", func(t *testing.T) {
		const msg = "Node's kubelet does not answer direct dials: dialling through its tunnel"
		if !slices.ContainsFunc(strings.Split(c.Server.output.String(), "\n"), func(l string) bool {
			return strings.Contains(l, msg) && strings.Contains(l, `node="`+c.AgentNode+`"`)
		}) {
			t.Fatalf("no %q for node %s in the server's log", msg, c.AgentNode)
		}
	})

	t.Run("without the tunnel: no logs, no exec", func(t *testing.T) {
		c.agentArgs = append(c.agentArgs, "--node-tunnel=off")
		c.restartAgent(t)
		waitAgentReady(t, c.Agent)
		if out, err := c.kubectl("logs", "--request-timeout=15s", "nat"); err == nil {
			t.Errorf("kubectl logs without the tunnel: %q, want an error", out)
		}
		if out, err := c.podExec("nat", "hostname"); err == nil {
			t.Errorf("kubectl exec without the tunnel: %q, want an error", out)
		}
	})
}

// dropFromServer makes the agent's namespace drop every new connection
// from the server's address (TCP and UDP alike), in an nftables table of
// the test's own; what the agent opens to the server still works.
func dropFromServer(t *testing.T, c *twoNodeCluster) {
	t.Helper()
	rules := fmt.Sprintf("table inet edgeplane-test-nat {\n chain input {\n  type filter hook input priority -10; policy accept;\n  ip saddr %s ct state new drop\n }\n}\n", c.ServerIP)
	cmd := exec.Command("ip", "netns", "exec", c.AgentNS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s", c.AgentNS, err, out)
	}
}

// dialFrom opens a TCP connection to addr from network namespace ns
// (bash's /dev/tcp, 5 s at most).
func dialFrom(ns, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "timeout", "5", "bash", "-c",
		"exec 3<>/dev/tcp/"+host+"/"+port).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
