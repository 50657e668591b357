// Command runc-nocap is a Docker runtime that removes, from the OCI spec it is
// handed, every capability the host's capability bounding set lacks, then runs
// the real runc with the same arguments.
//
// Why: some hosts (these CI machines) run Docker inside a container whose
// bounding set lacks CAP_SYS_RESOURCE. Docker asks runc for every capability
// for a --privileged container, runc cannot grant one it does not hold, and
// every kind node fails with "unable to apply caps". host-setup.sh installs
// this wrapper as Docker's default runtime only on such hosts.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames maps capability numbers to names, as in linux/capability.h.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "runc-nocap: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	missing, err := missingCaps()
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		if file, isProcess := specFile(args); file != "" {
			if err := stripCaps(file, isProcess, missing); err != nil {
				return err
			}
		}
	}
	real, err := realRunc()
	if err != nil {
		return err
	}
	return syscall.Exec(real, append([]string{"runc"}, args...), os.Environ())
}

// missingCaps returns the names of the capabilities absent from our bounding set.
func missingCaps() (map[string]bool, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		hex, ok := strings.CutPrefix(sc.Text(), "CapBnd:")
		if !ok {
			continue
		}
		bnd, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parse CapBnd: %w", err)
		}
		missing := map[string]bool{}
		for i, name := range capNames {
			if bnd&(1<<uint(i)) == 0 {
				missing[name] = true
			}
		}
		return missing, nil
	}
	return nil, fmt.Errorf("no CapBnd in /proc/self/status")
}

// specFile finds the file runc will read capabilities from: the bundle's
// config.json for create and run, the --process file for exec.
func specFile(args []string) (file string, isProcess bool) {
	cmd, bundle, process := "", "", ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case a == "--bundle" || a == "-b":
			bundle = next()
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		case a == "--process" || a == "-p":
			process = next()
		case strings.HasPrefix(a, "--process="):
			process = strings.TrimPrefix(a, "--process=")
		case cmd == "" && !strings.HasPrefix(a, "-"):
			cmd = a
		case cmd == "" && (a == "--root" || a == "--log" || a == "--log-format" || a == "--criu"):
			i++ // a global flag's value is not the command
		}
	}
	switch cmd {
	case "create", "run":
		if bundle == "" {
			bundle = "."
		}
		return filepath.Join(bundle, "config.json"), false
	case "exec":
		return process, true
	}
	return "", false
}

// stripCaps rewrites file without the missing capabilities, keeping every
// other field as it was.
func stripCaps(file string, isProcess bool, missing map[string]bool) error {
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("parse %s: %w", file, err)
	}
	proc := doc
	if !isProcess {
		p, ok := doc["process"].(map[string]any)
		if !ok {
			return nil
		}
		proc = p
	}
	caps, ok := proc["capabilities"].(map[string]any)
	if !ok {
		return nil
	}
	for set, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(list))
		for _, c := range list {
			if s, _ := c.(string); !missing[s] {
				kept = append(kept, c)
			}
		}
		caps[set] = kept
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, fi.Mode().Perm())
}

// realRunc finds runc on PATH, skipping this program.
func realRunc() (string, error) {
	if p := os.Getenv("SANDBOX_E2E_REAL_RUNC"); p != "" {
		return p, nil
	}
	self, _ := os.Executable()
	for _, dir := range filepath.SplitList(os.Getenv("PATH") + ":/usr/sbin:/usr/bin") {
		p := filepath.Join(dir, "runc")
		if p == self {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("runc")
}
