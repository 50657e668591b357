package exec

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Out-of-memory detection.
//
// Two things can stop a snippet for memory. The RLIMIT_AS cap
// (Options.MemoryLimit) makes allocations fail, Python raises MemoryError,
// and the preamble prints it and SIGKILLs itself (see limits.go). The
// cgroup's limit (the pod's memory limit) makes the kernel's OOM killer
// SIGKILL a process. Run reads the cgroup's oom_kill counter before and after:
// a child that died of a SIGKILL we did not send was OOM-killed if the
// counter rose, or if a memory cap was set. In a pod whose cgroup has
// memory.oom.group set (Kubernetes sets it on cgroup v2) the OOM killer takes
// the runner too and nothing answers; the pool must then report the pod's
// OOMKilled status. A cap somewhat below the pod's limit avoids that.

// memCgroup is the memory cgroup directory of this process and whether it
// is cgroup v2, or "" when there is none to read.
func memCgroup() (dir string, v2 bool) {
	return cgroupOf("memory", "memory.events", "memory.oom_control")
}

// cgroupOf finds this process's cgroup directory for controller: the v1
// hierarchy of that controller when there is one, else the v2 one. v2File
// and v1File are files the controller puts in each directory, to tell a
// directory that is really there from a path that is the host's view.
func cgroupOf(controller, v2File, v1File string) (dir string, v2 bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			d := "/sys/fs/cgroup" + parts[2]
			if _, err := os.Stat(d + "/" + v2File); err == nil {
				dir, v2 = d, true
			}
		case hasController(parts[1], controller):
			d := "/sys/fs/cgroup/" + controller + parts[2]
			if _, err := os.Stat(d + "/" + v1File); err != nil {
				// In a container the path is often the host's view; the
				// container's own cgroup is mounted at the root.
				d = "/sys/fs/cgroup/" + controller
			}
			return d, false
		}
	}
	return dir, v2
}

// PidsLimit is the pids cgroup limit of this process (pids.max, v1 or v2),
// or 0 when there is none or it cannot be read.
func PidsLimit() int64 {
	dir, _ := cgroupOf("pids", "pids.max", "pids.max")
	if dir == "" {
		return 0
	}
	b, err := os.ReadFile(dir + "/pids.max")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil { // "max"
		return 0
	}
	return n
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// oomKills returns the cgroup's oom_kill counter, or -1 when unknown.
func oomKills(dir string, v2 bool) int64 {
	if dir == "" {
		return -1
	}
	file := dir + "/memory.oom_control"
	if v2 {
		file = dir + "/memory.events"
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == "oom_kill" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// cgroupMemoryLimit returns the cgroup's memory limit in bytes, or 0 when
// there is none or it cannot be read.
func cgroupMemoryLimit(dir string, v2 bool) int64 {
	if dir == "" {
		return 0
	}
	file := dir + "/memory.limit_in_bytes"
	if v2 {
		file = dir + "/memory.max"
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n >= 1<<62 { // "max", or v1's "unlimited" near 2^63
		return 0
	}
	return n
}

// oomLine is the stderr line that reports an out-of-memory kill.
func oomLine(limit int64) string {
	if limit <= 0 {
		return "killed: out of memory\n"
	}
	return "killed: out of memory (limit " + formatBytes(limit) + ")\n"
}

func formatBytes(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
