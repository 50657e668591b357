// Command pause is the pod sandbox process for the offline kind cluster: it
// holds the pod's namespaces open, reaps orphaned children (it is PID 1 of
// the pod when the process namespace is shared) and exits on SIGTERM or
// SIGINT. It replaces the upstream pause image, which cannot be pulled here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking, so none stays a zombie.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
