package bootstrap

import (
	"errors"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
	"github.com/edgeplane/edgeplane/pkg/nodetunnel"
)

// TestAgentLBServerPort: --lb-server-port defaults to the endpoint's port
// and refuses what is not a port, naming the flag.
func TestAgentLBServerPort(t *testing.T) {
	for _, tc := range []struct {
		name    string
		port    *int
		want    int
		wantErr string
	}{
		{name: "default", want: apiendpoint.DefaultPort},
		{name: "another port", port: new(7444), want: 7444},
		{name: "zero", port: new(0), wantErr: "--lb-server-port 0: want a port, 1-65535"},
		{name: "too big", port: new(70000), wantErr: "--lb-server-port 70000: want a port, 1-65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := completeAgent(t, func(o *AgentOptions) {
				if tc.port != nil {
					o.LBServerPort = *tc.port
				}
			})
			if problemAsWanted(t, err, tc.wantErr) {
				return
			}
			if c.LBServerPort != tc.want {
				t.Errorf("port %d, want %d", c.LBServerPort, tc.want)
			}
		})
	}
}

// TestAgentNodeTunnel: --node-tunnel defaults to auto and refuses what is
// not a mode, naming the flag.
func TestAgentNodeTunnel(t *testing.T) {
	for _, tc := range []struct {
		name, value string // "": the default
		want        nodetunnel.Mode
		wantErr     string
	}{
		{name: "default", want: nodetunnel.ModeAuto},
		{name: "always", value: "always", want: nodetunnel.ModeAlways},
		{name: "off", value: "off", want: nodetunnel.ModeOff},
		{name: "not a mode", value: "on", wantErr: `--node-tunnel: node tunnel mode "on": want auto, always or off`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := completeAgent(t, func(o *AgentOptions) {
				if tc.value != "" {
					o.NodeTunnel = tc.value
				}
			})
			if problemAsWanted(t, err, tc.wantErr) {
				return
			}
			if c.NodeTunnel != tc.want {
				t.Errorf("mode %q, want %q", c.NodeTunnel, tc.want)
			}
		})
	}
}

// completeAgent completes and validates agent options that join a test
// server, changed by set first: the completed options and every problem.
func completeAgent(t *testing.T, set func(*AgentOptions)) (CompletedAgentOptions, error) {
	t.Helper()
	const token = "K10" + "0000000000000000000000000000000000000000000000000000000000000000" + "::abcdef.0123456789abcdef"
	o := NewAgentOptions()
	o.DataDir, o.Server, o.Token = t.TempDir(), "https://10.0.0.1:6443", token
	set(o)
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	return c, errors.Join(c.Validate()...)
}

// problemAsWanted fails t unless err names want (when want is set) or is
// nil (when it is not); it says whether the case ends there.
func problemAsWanted(t *testing.T, err error, want string) (done bool) {
	t.Helper()
	if want != "" {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("problems %v, want %q", err, want)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}
