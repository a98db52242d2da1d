package kubelet

import (
	"fmt"

	"k8s.io/kubernetes/pkg/capabilities"
)

// allowPrivileged sets whether this process's kubelet runs privileged
// containers, and checks that it does. Upstream keeps it in one
// process-wide setting, k8s.io/kubernetes/pkg/capabilities, set once: the
// first Initialize wins and later ones are ignored. The kubelet's app.Run
// initializes it to allow, which would win in an agent; in a server that is
// its own node the API server (built first) set it from --allow-privileged
// already. The kubelet consults it where the API server's check cannot
// reach: the static pods it reads from files, which it refuses to run
// ("privileged: Forbidden: disallowed by cluster policy") when false.
func allowPrivileged(allow bool) error {
	capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: allow})
	if got := capabilities.Get().AllowPrivileged; got != allow {
		return fmt.Errorf("kubelet: this process already has privileged containers %s, the kubelet is to have them %s: the API server and the kubelet of one process must agree (--allow-privileged)",
			allowedWord(got), allowedWord(allow))
	}
	return nil
}

func allowedWord(allow bool) string {
	if allow {
		return "allowed"
	}
	return "refused"
}
