package e2e

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
)

// nslookupAnswers parses nslookup's output (busybox's, as the test image
// has it; BIND's reads the same) into the addresses it answered for each
// name. The server's own lines (before the first "Name:") are not answers.
// An address line is "Address: IP" or busybox's older "Address N: IP [name]".
func nslookupAnswers(out string) map[string][]string {
	answers := map[string][]string{}
	name := ""
	for _, line := range strings.Split(out, "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(value)
		switch key = strings.TrimSpace(key); {
		case key == "Name" && len(fields) > 0:
			name = strings.TrimSuffix(fields[0], ".")
		case name != "" && (key == "Address" || strings.HasPrefix(key, "Address ")) && len(fields) > 0:
			answers[name] = append(answers[name], fields[0])
		}
	}
	return answers
}

// checkNslookup says whether out answers name with exactly the address
// want, the whole address and nothing else: "Address: 10.43.0.10"
// contains "Address: 10.43.0.1", but it is not the answer 10.43.0.1.
func checkNslookup(out, name, want string) error {
	got := nslookupAnswers(out)[strings.TrimSuffix(name, ".")]
	for _, a := range got {
		if net.ParseIP(a) == nil {
			return fmt.Errorf("nslookup %s: answer %q is not an address:\n%s", name, a, out)
		}
	}
	if !slices.Equal(got, []string{want}) {
		return fmt.Errorf("nslookup %s answered %v, want exactly [%s]:\n%s", name, got, want, out)
	}
	return nil
}

func TestCheckNslookup(t *testing.T) {
	const server = "Server:\t\t10.43.0.10\nAddress:\t10.43.0.10:53\n\n"
	tests := []struct {
		name, out, query, want string
		ok                     bool
	}{
		{name: "the answer", out: server + "Name:\tkubernetes.default.svc.cluster.local\nAddress: 10.43.0.1\n\n",
			query: "kubernetes.default.svc.cluster.local", want: "10.43.0.1", ok: true},
		// The substring match this replaces took 10.43.0.10-19 for 10.43.0.1.
		{name: "a longer address with the wanted one as its prefix", out: server + "Name:\tkube-dns.kube-system.svc.cluster.local\nAddress: 10.43.0.10\n\n",
			query: "kube-dns.kube-system.svc.cluster.local", want: "10.43.0.1"},
		{name: "the server's address is no answer", out: server + "*** Can't find kubernetes.default.svc.cluster.local: No answer\n",
			query: "kubernetes.default.svc.cluster.local", want: "10.43.0.10"},
		{name: "an answer for another name", out: server + "Name:\tother.default.svc.cluster.local\nAddress: 10.43.0.1\n",
			query: "kubernetes.default.svc.cluster.local", want: "10.43.0.1"},
		{name: "a second address", out: server + "Name:\techo.default.svc.cluster.local\nAddress: 10.43.7.7\nAddress: 10.43.7.8\n",
			query: "echo.default.svc.cluster.local", want: "10.43.7.7"},
		{name: "the older busybox form", out: "Server:    10.43.0.10\nAddress 1: 10.43.0.10 kube-dns.kube-system.svc.cluster.local\n\nName:      echo.default.svc.cluster.local\nAddress 1: 10.43.7.7 echo.default.svc.cluster.local\n",
			query: "echo.default.svc.cluster.local", want: "10.43.7.7", ok: true},
		{name: "an AAAA miss after the answer", out: server + "Name:\techo.default.svc.cluster.local\nAddress: 10.43.7.7\n\n*** Can't find echo.default.svc.cluster.local: No answer\n",
			query: "echo.default.svc.cluster.local", want: "10.43.7.7", ok: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNslookup(tc.out, tc.query, tc.want)
			if (err == nil) != tc.ok {
				t.Errorf("checkNslookup(%q, %q) = %v, want ok=%v", tc.query, tc.want, err, tc.ok)
			}
		})
	}
}
