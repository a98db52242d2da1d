// Command pause is the process of edgeplane's embedded pod sandbox image
// (pkg/pauseimage): PID 1 of a pod's namespaces. It does what upstream's
// pause (kubernetes/build/pause) does: it exits 0 on SIGINT or SIGTERM,
// reaps the children the pod's processes leave to it when they are
// orphaned in the pod's PID namespace (SIGCHLD), and otherwise sleeps.
//
// It imports only the standard library's os and os/signal, so that it
// builds with CGO_ENABLED=0 for every architecture edgeplane ships and its
// bytes depend on nothing but this file and the Go toolchain.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

// version is printed by -v, as upstream's pause does.
const version = "edgeplane-pause 1"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-v" {
		os.Stdout.WriteString(version + "\n")
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	// After Notify: a caller that reads this line knows that a signal
	// sent from now on is handled.
	if os.Getpid() != 1 {
		os.Stderr.WriteString("Warning: pause should be the first process\n")
	}
	// A child that ended before Notify sent its SIGCHLD to no one.
	reap()
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Stderr.WriteString("Shutting down, got signal: " + s.String() + "\n")
		os.Exit(0)
	}
}

// reap waits for every child that has ended. SIGCHLDs coalesce, so one
// signal may stand for several children.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
