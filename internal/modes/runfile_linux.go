package modes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/local"
	"github.com/sandboxd/sandbox/internal/runner"
	"github.com/sandboxd/sandbox/internal/seal"
	"github.com/sandboxd/sandbox/internal/weaken"
)

// Validate checks the flags before anything runs.
func (c *RunCmd) Validate() error {
	switch {
	case c.Timeout <= 0:
		return errors.New("--timeout must be positive")
	case c.MaxTimeout <= 0:
		return errors.New("--max-timeout must be positive")
	case c.CodeFile != "" && c.Timeout > c.MaxTimeout:
		return fmt.Errorf("--timeout %s is over --max-timeout %s", c.Timeout, c.MaxTimeout)
	case c.MaxOutput <= 0:
		return errors.New("--max-output must be positive")
	case c.MemoryLimit < 0 || c.MaxProcs < 0 || c.MaxFileSize < 0:
		return errors.New("--memory-limit, --max-procs and --max-file-size must not be negative")
	case c.CodeFile != "" && c.Workdir != "" && c.isolated():
		return errors.New("--workdir: an isolated run works in a private tmpfs; use --isolation none to run in a directory of the host")
	}
	if _, err := weaken.Parse(c.Weaken, true); err != nil {
		return fmt.Errorf("--weaken: %w", err)
	}
	if _, err := exec.ParsePreload(c.Preload); err != nil {
		return fmt.Errorf("--preload: %w", err)
	}
	if err := runner.CheckSnippetEnv(c.SnippetEnv); err != nil {
		return fmt.Errorf("--snippet-env: %w", err)
	}
	for _, a := range append(append([]string(nil), c.SealProbe...), c.SealDNS...) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("--seal-probe/--seal-dns %q: %w", a, err)
		}
	}
	for _, a := range c.SealICMP {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("--seal-icmp %q: %w", a, err)
		}
	}
	return nil
}

// snippetEnv is the snippet's environment for a run working in dir: the
// runner's default and --snippet-env; nil (exec's default) without the
// latter.
func (c *RunCmd) snippetEnv(dir string) []string {
	if len(c.SnippetEnv) == 0 {
		return nil
	}
	return append(exec.DefaultEnv(dir), c.SnippetEnv...)
}

// weakenings are the weakenings asked for; Validate has refused any other name.
func (c *RunCmd) weakenings() weaken.Set {
	s, _ := weaken.Parse(c.Weaken, true)
	return s
}

// options are the exec options the flags ask for; Dir is left to the form.
func (c *RunCmd) options() exec.Options {
	return exec.Options{MaxOutput: c.MaxOutput, MemoryLimit: c.MemoryLimit, MaxProcs: c.MaxProcs,
		MaxFileSize: c.MaxFileSize, WeakenKillLeaderOnly: c.weakenings().Has(weaken.KillLeaderOnly)}
}

// sealTargets are what the runner must prove cut: --seal-probe (or the API
// server's Service address the kubelet gives every container) and
// --seal-dns.
func (c *RunCmd) sealTargets() []seal.Target {
	probes := c.SealProbe
	if len(probes) == 0 {
		if a := seal.APIServerAddr(os.Getenv); a != "" {
			probes = []string{a}
		}
	}
	var ts []seal.Target
	for _, a := range probes {
		ts = append(ts, seal.Target{Kind: seal.TCP, Addr: a})
	}
	for _, a := range c.SealDNS {
		ts = append(ts, seal.Target{Kind: seal.DNS, Addr: a, Name: c.SealDNSName})
	}
	for _, a := range c.SealICMP {
		ts = append(ts, seal.Target{Kind: seal.ICMP, Addr: a})
	}
	return ts
}

// isolated reports whether a --code-file run is isolated: always as root,
// unless --isolation none says otherwise in so many words. As another user
// the snippet runs as that user, who could run it without us.
func (c *RunCmd) isolated() bool {
	return os.Geteuid() == 0 && c.Isolation != local.IsolationNone
}

// runFile runs the --code-file snippet here and writes its result to stdout.
func (c *RunCmd) runFile(ctx context.Context, stdout io.Writer) error {
	code, err := readCode(c.CodeFile)
	if err != nil {
		return err
	}
	opts := c.options()
	opts.Dir = c.Workdir
	if c.isolated() {
		sb, err := c.sandbox()
		if err != nil {
			return err
		}
		opts.Sandbox = sb
		opts.Env = c.snippetEnv(exec.SandboxDir)
		if sb.Cgroups != nil && sb.Cgroups.Memory != "" {
			// The cgroup bounds memory and counts OOM kills; an
			// address-space cap would only make Python fail earlier.
			opts.MemoryLimit = 0
		}
	} else if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "sandbox-run-")
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		defer os.RemoveAll(dir)
		opts.Dir = dir
	} else if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if opts.Sandbox == nil {
		opts.Env = c.snippetEnv(opts.Dir)
	}
	res, err := exec.Run(ctx, exec.Job{Code: code, Timeout: c.Timeout}, opts)
	if err != nil {
		return err
	}
	res.SandboxID = exec.LocalID()
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(res)
}

// sandbox is the isolation of a --code-file run as root. Without cgroups
// the rlimits still bound it, and auto accepts that; strict does not.
func (c *RunCmd) sandbox() (*exec.Sandbox, error) {
	uid := exec.RandomSandboxUID()
	sb := &exec.Sandbox{UID: uid, GID: uid, MemoryLimit: c.MemoryLimit}
	cg, err := exec.FindCgroups()
	switch {
	case err == nil:
		sb.Cgroups = cg
	case c.Isolation == local.IsolationStrict:
		return nil, fmt.Errorf("run: isolation strict: %w", err)
	}
	if err := exec.SeccompSupported(); err != nil {
		if c.Isolation == local.IsolationStrict {
			return nil, fmt.Errorf("run: isolation strict: %w", err)
		}
		sb.NoSeccomp = true
	}
	return sb, nil
}

func readCode(file string) (string, error) {
	var (
		b   []byte
		err error
	)
	if file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", fmt.Errorf("read code: %w", err)
	}
	return string(b), nil
}
