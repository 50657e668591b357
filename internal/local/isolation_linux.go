package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox/internal/exec"
)

// isolation is how runs are isolated on this host.
type isolation struct {
	// sandbox: every run is an exec.Sandbox, with the cgroups (nil: none)
	// and the seccomp filter as found.
	sandbox bool
	cgroups *exec.CgroupParent
	seccomp bool
	// cloneflags are the namespaces of the weaker modes, which run in a
	// directory on the host.
	cloneflags uintptr
	// ownUID: each run gets a uid of its own (we are root).
	ownUID bool
	// sharedUID, when set, is every run's uid, as before runs had their
	// own: the tests' positive control of the process-count hog.
	sharedUID uint32
	// missing names the properties this host could not give.
	missing []string
}

// namespaces are the ones a run of the weaker modes gets when the host
// allows. A variable so that a test can make the kernel refuse them.
var namespaces uintptr = syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// sandboxOff, when set, makes trySandbox fail with it: the tests' way to
// take the weaker paths on a host that has the sandbox.
var sandboxOff error

// What a run lacks outside a sandbox, in the words the log uses.
var (
	propNamespaces = "namespaces (no network, own PIDs, mounts, IPC, host name)"
	propSandbox    = []string{
		"read-only view of the host",
		"fresh /proc of the run's PID namespace",
		"private size-bounded /tmp, /var/tmp, /dev/shm and working directory, gone with the run",
		"code and input files written where only serve and the run reach them",
		"no_new_privs",
		"no new user namespaces (seccomp)",
		"memory and pids cgroups per run (the rlimits bound it instead)",
		"oom_killed from the kernel's counter",
	}
)

// chooseIsolation takes the strongest isolation under which a probe
// snippet runs, and logs every property it could not get.
func (b *Backend) chooseIsolation(ctx context.Context) error {
	log := b.log
	log.Warn("local backend: every execution is a process on this machine: it shares the host's kernel and can " +
		"read what any user may read here. Use it for development or on one trusted machine.")
	if b.opts.Isolation == IsolationNone {
		log.Warn("local backend: isolation off: snippets run as this user, with the host's network and files")
		if err := b.makeBase(); err != nil {
			return err
		}
		if err := b.probe(ctx, isolation{}); err != nil {
			return fmt.Errorf("local backend: cannot run snippets: %w", err)
		}
		return nil
	}
	var missing []string
	if os.Geteuid() == 0 {
		iso, err := b.trySandbox(ctx)
		if err == nil {
			return b.settle(iso)
		}
		missing = append(missing, annotate(propSandbox, err)...)
	} else {
		missing = append(missing, "a uid of its own per run (needs root)")
		missing = append(missing, annotate(propSandbox, errors.New("needs root"))...)
	}
	if err := b.makeBase(); err != nil {
		return err
	}
	attempts := []isolation{{cloneflags: namespaces | syscall.CLONE_NEWUSER}, {}}
	if os.Geteuid() == 0 {
		attempts = []isolation{{cloneflags: namespaces, ownUID: true}, {ownUID: true}}
	}
	var errs []error
	for _, iso := range attempts {
		err := b.probe(ctx, iso)
		if err == nil {
			b.iso = iso
			break
		}
		errs = append(errs, err)
	}
	if len(errs) == len(attempts) {
		return fmt.Errorf("local backend: cannot run snippets: %w", errors.Join(errs...))
	}
	if len(errs) > 0 {
		missing = append([]string{propNamespaces + ": " + errors.Join(errs...).Error()}, missing...)
	}
	b.iso.missing = missing
	return b.settle(b.iso)
}

// trySandbox finds the cgroups and the seccomp filter and probes a
// sandboxed run; it fails only when no sandbox runs at all.
func (b *Backend) trySandbox(ctx context.Context) (isolation, error) {
	if sandboxOff != nil {
		return isolation{}, sandboxOff
	}
	iso := isolation{sandbox: true, ownUID: true, seccomp: true}
	if err := exec.SeccompSupported(); err != nil {
		iso.seccomp = false
		iso.missing = append(iso.missing, "no new user namespaces: "+err.Error())
	}
	cg, err := exec.FindCgroups()
	switch {
	case err != nil:
		iso.missing = append(iso.missing, "memory and pids cgroups per run (address-space and process rlimits instead; "+
			"no oom_killed): "+err.Error())
	case cg.Memory == "":
		iso.missing = append(iso.missing, "memory cgroup per run (an address-space rlimit instead; no oom_killed)")
	case cg.Pids == "":
		iso.missing = append(iso.missing, "pids cgroup per run (the per-uid process rlimit instead)")
	}
	iso.cgroups = cg
	if err := b.probe(ctx, iso); err != nil {
		return isolation{}, err
	}
	return iso, nil
}

// settle makes iso the backend's, after strict has had its say.
func (b *Backend) settle(iso isolation) error {
	if len(iso.missing) > 0 && b.opts.Isolation == IsolationStrict {
		return fmt.Errorf("local backend: isolation strict, but this host cannot give: %s", strings.Join(iso.missing, "; "))
	}
	b.iso = iso
	for _, m := range iso.missing {
		b.log.Warn("local backend: runs lack a property of isolation", "missing", m)
	}
	b.log.Info("local backend ready",
		"sandboxed", iso.sandbox,
		"namespaces", iso.sandbox || iso.cloneflags != 0,
		"network", map[bool]string{true: "none", false: "host"}[iso.sandbox || iso.cloneflags != 0],
		"own_uid_per_run", iso.ownUID,
		"cgroups", iso.cgroups != nil,
		"max_concurrent", b.opts.MaxConcurrent,
		"memory_limit_bytes", b.opts.MemoryLimit)
	if !iso.ownUID && os.Geteuid() == 0 {
		b.log.Warn("local backend: snippets run as root")
	}
	return nil
}

// annotate appends why to each property.
func annotate(props []string, why error) []string {
	out := make([]string, len(props))
	for i, p := range props {
		out[i] = p + ": " + why.Error()
	}
	return out
}

// makeBase makes the directory of the weaker modes' run directories.
func (b *Backend) makeBase() error {
	base, err := os.MkdirTemp("", "sandbox-local-")
	if err == nil {
		err = os.Chmod(base, 0o711)
	}
	if err != nil {
		return fmt.Errorf("local backend: %w", err)
	}
	b.base = base
	return nil
}

// probe runs a trivial snippet under iso; it fails when the kernel refuses
// the namespaces or the uid cannot run Python.
func (b *Backend) probe(ctx context.Context, iso isolation) error {
	res, err := b.run(ctx, exec.Job{Code: "import os, sys\nsys.exit(0 if os.getcwd() else 1)\n", Timeout: 10 * time.Second}, iso)
	if err != nil {
		return fmt.Errorf("probe (sandbox %v, namespaces %v): %w", iso.sandbox, iso.cloneflags != 0, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("probe (sandbox %v, namespaces %v) exited %d: %s", iso.sandbox, iso.cloneflags != 0, res.ExitCode, res.Stderr)
	}
	return nil
}

// uidSet holds the uids of runs in flight, so that no two share one.
type uidSet struct {
	sync.Mutex
	m map[uint32]bool
}

// take returns a uid no run in flight has, or shared when set.
func (s *uidSet) take(shared uint32) uint32 {
	if shared != 0 {
		return shared
	}
	s.Lock()
	defer s.Unlock()
	for {
		if u := exec.RandomSandboxUID(); !s.m[u] {
			s.m[u] = true
			return u
		}
	}
}

func (s *uidSet) give(u uint32) {
	s.Lock()
	delete(s.m, u)
	s.Unlock()
}
