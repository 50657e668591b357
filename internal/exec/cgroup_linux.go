package exec

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A run's own cgroups.
//
// An isolated run gets a memory and a pids cgroup of its own, made under
// this process's cgroups: on cgroup v1 one in each hierarchy, on v2 one
// directory. Its memory bound is then the kernel's, for all its processes
// and the tmpfs pages they write, and whether it was OOM-killed is read from
// that cgroup's own oom_kill counter, which nothing in the run can forge.
//
// Where the host has the cpu controller, a run also gets a cpu cgroup of
// default weight: the scheduler then weighs all of a run's processes
// together like one process of the host, instead of each alone. Without it
// a fork bomb's thousand runnable processes outweigh serve a thousand to
// one, and serve's own deadline timer fires seconds late on a busy machine.
// At the kill the weight goes to the maximum, so that the run's processes,
// which must each run to exit, die at once.

// CgroupParent is where runs' cgroups are made. Its zero fields mean the
// host lacks that controller (the rlimits are then the bound).
type CgroupParent struct {
	// Memory, Pids and CPU are the parent directories; on v2 they are the
	// same. CPU is optional: "" only costs the weighting described above.
	Memory, Pids, CPU string
	// V2 is true on the unified hierarchy.
	V2 bool
}

// FindCgroups finds, and tries out, where this process may make its runs'
// cgroups. It needs root. On v2 a cgroup with processes cannot hand
// controllers to children, so it first moves this process into a leaf of
// its own ("sandbox-serve"), as a delegated service is expected to.
func FindCgroups() (*CgroupParent, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("find cgroups: %w", err)
	}
	var p CgroupParent
	var unified string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			unified = parts[2]
		case hasController(parts[1], "memory"):
			p.Memory = v1Dir("memory", parts[2])
		case hasController(parts[1], "pids"):
			p.Pids = v1Dir("pids", parts[2])
		case hasController(parts[1], "cpu"):
			p.CPU = v1Dir("cpu", parts[2])
		}
	}
	if p.Memory == "" && p.Pids == "" && unified != "" {
		if err := p.useV2(unified); err != nil {
			return nil, err
		}
	}
	if p.Memory == "" && p.Pids == "" {
		return nil, errors.New("find cgroups: no memory or pids controller")
	}
	// Try it out: a cgroup we cannot make or remove is no use.
	rc, err := p.newRun(1<<30, 64)
	if err != nil {
		return nil, err
	}
	if err := rc.remove(); err != nil {
		return nil, err
	}
	return &p, nil
}

// v1Dir is a v1 hierarchy's directory for path. In a container the path is
// often the host's view while the container's own cgroup is the mount's root.
func v1Dir(controller, path string) string {
	d := filepath.Join("/sys/fs/cgroup", controller, path)
	if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil {
		d = filepath.Join("/sys/fs/cgroup", controller)
	}
	if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil {
		return ""
	}
	return d
}

// useV2 sets p up on the unified hierarchy at path, enabling memory and pids
// for children; see FindCgroups.
func (p *CgroupParent) useV2(path string) error {
	dir := filepath.Join("/sys/fs/cgroup", path)
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("find cgroups: %w", err)
	}
	var want []string
	for _, c := range []string{"memory", "pids"} {
		if hasController(strings.ReplaceAll(strings.TrimSpace(string(ctrl)), " ", ","), c) {
			want = append(want, "+"+c)
		}
	}
	if len(want) == 0 {
		return errors.New("find cgroups: v2 without memory or pids")
	}
	enable := func() error {
		return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(want, " ")), 0o644)
	}
	if err := enable(); err != nil {
		leaf := filepath.Join(dir, "sandbox-serve")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("find cgroups: %w", err)
		}
		self := []byte(strconv.Itoa(os.Getpid()))
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), self, 0o644); err != nil {
			os.Remove(leaf)
			return fmt.Errorf("find cgroups: move into a leaf: %w", err)
		}
		if err := enable(); err != nil {
			// Other processes share our cgroup: go back where we were.
			_ = os.WriteFile(filepath.Join(dir, "cgroup.procs"), self, 0o644)
			os.Remove(leaf)
			return fmt.Errorf("find cgroups: enable %s: %w", strings.Join(want, " "), err)
		}
	}
	// cpu on its own: the kernel refuses it while a real-time process
	// shares the cgroup, and runs do without it.
	if hasController(strings.ReplaceAll(strings.TrimSpace(string(ctrl)), " ", ","), "cpu") {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+cpu"), 0o644)
	}
	sub, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	for _, c := range strings.Fields(string(sub)) {
		switch c {
		case "memory":
			p.Memory = dir
		case "pids":
			p.Pids = dir
		case "cpu":
			p.CPU = dir
		}
	}
	p.V2 = true
	return nil
}

// runCgroup is one run's cgroups.
type runCgroup struct {
	parent            *CgroupParent
	memory, pids, cpu string // "" where the host has no such controller
	memoryLimit       int64
}

// newRun makes a run's cgroups with its bounds. memory <= 0 leaves memory
// unbounded (but still counted, so the OOM counter is the run's own).
func (p *CgroupParent) newRun(memory int64, procs int) (*runCgroup, error) {
	var b [8]byte
	rand.Read(b[:])
	name := "sandbox-run-" + hex.EncodeToString(b[:])
	rc := &runCgroup{parent: p, memoryLimit: memory}
	mk := func(parent string) (string, error) {
		if parent == "" {
			return "", nil
		}
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("make cgroup: %w", err)
		}
		return d, nil
	}
	var err error
	if rc.memory, err = mk(p.Memory); err != nil {
		return nil, err
	}
	if p.Pids == p.Memory {
		rc.pids = rc.memory
	} else if rc.pids, err = mk(p.Pids); err != nil {
		rc.remove()
		return nil, err
	}
	switch {
	case p.CPU == p.Memory:
		rc.cpu = rc.memory
	case p.CPU == p.Pids:
		rc.cpu = rc.pids
	default:
		if rc.cpu, err = mk(p.CPU); err != nil {
			rc.remove()
			return nil, err
		}
	}
	if err := rc.limit(memory, procs); err != nil {
		rc.remove()
		return nil, err
	}
	return rc, nil
}

func (rc *runCgroup) limit(memory int64, procs int) error {
	var files [][2]string
	if rc.memory != "" && memory > 0 {
		m := strconv.FormatInt(memory, 10)
		if rc.parent.V2 {
			// No swap either, so the limit is the run's whole footprint.
			files = append(files, [2]string{"memory.max", m}, [2]string{"memory.swap.max", "0"})
		} else {
			// memsw (memory+swap) only exists with swap accounting; it must
			// be set after the plain limit, which it may not be below.
			files = append(files, [2]string{"memory.limit_in_bytes", m}, [2]string{"memory.memsw.limit_in_bytes", m})
		}
	}
	if rc.pids != "" && procs > 0 {
		files = append(files, [2]string{"pids.max", strconv.Itoa(procs)})
	}
	for _, f := range files {
		dir := rc.memory
		if strings.HasPrefix(f[0], "pids.") {
			dir = rc.pids
		}
		err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && (f[0] == "memory.memsw.limit_in_bytes" || f[0] == "memory.swap.max")) {
			return fmt.Errorf("limit cgroup: %s: %w", f[0], err)
		}
	}
	return nil
}

// place moves pid (all its threads) into the run's cgroups.
func (rc *runCgroup) place(pid int) error {
	for _, d := range rc.dirs() {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("enter cgroup: %w", err)
		}
	}
	return nil
}

// dirs are the run's cgroup directories, each once.
func (rc *runCgroup) dirs() []string {
	var ds []string
	for _, d := range []string{rc.memory, rc.pids, rc.cpu} {
		if d != "" && !slices.Contains(ds, d) {
			ds = append(ds, d)
		}
	}
	return ds
}

// idle gives the run's cpu cgroup the weight of one nice-19 process (15
// against a nice-0 process's 1,024; on v2 the lowest weight, 1 against
// 100) until wake: a pre-started run's python3 and its preload then take
// a small share of a busy host and hardly slow a run in flight. The lowest
// weight v1 allows (2, like SCHED_IDLE) starved the preload on a host busy
// with niced work: at a load average of 40 on 2 cores, none of the data
// stack's preloads finished in 2 minutes (2026-12-06). Without a cpu
// cgroup the preload runs at the default weight.
func (rc *runCgroup) idle() { rc.weigh("15", "1") }

// wake gives the run's cpu cgroup the default weight back, as its job
// comes.
func (rc *runCgroup) wake() { rc.weigh("1024", "100") }

// hurry gives the run's cpu cgroup the highest weight, just before it is
// killed: every one of its processes must be scheduled once more to exit.
func (rc *runCgroup) hurry() { rc.weigh("262144", "10000") }

// weigh sets the cpu cgroup's weight: shares on v1, weight on v2.
func (rc *runCgroup) weigh(v1, v2 string) {
	if rc == nil || rc.cpu == "" {
		return
	}
	file, w := "cpu.shares", v1
	if rc.parent.V2 {
		file, w = "cpu.weight", v2
	}
	_ = os.WriteFile(filepath.Join(rc.cpu, file), []byte(w), 0o644)
}

// oomKills is the run's own OOM-kill count, or -1 without a memory cgroup.
func (rc *runCgroup) oomKills() int64 {
	if rc == nil || rc.memory == "" {
		return -1
	}
	return oomKills(rc.memory, rc.parent.V2)
}

// remove deletes the run's cgroups. Their processes are dead by now, but a
// killed task can take a moment to leave, so it retries briefly.
func (rc *runCgroup) remove() error {
	var errs []error
	for _, d := range rc.dirs() {
		var err error
		for range 100 {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}
