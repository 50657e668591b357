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
	"time"

	"github.com/sandboxd/sandbox/exec"
	"github.com/sandboxd/sandbox/local"
	"github.com/sandboxd/sandbox/runner"
	"github.com/sandboxd/sandbox/seal"
	"github.com/sandboxd/sandbox/weaken"
)

// RunCmd runs one snippet: from a file here (--code-file), or as the pod
// entrypoint that takes exactly one job over HTTP and then exits.
type RunCmd struct {
	CodeFile     string        `name:"code-file" env:"SANDBOX_CODE_FILE" placeholder:"FILE" help:"Run this Python file here and print the result JSON (- reads standard input). Without it, serve one job over HTTP."`
	Timeout      time.Duration `default:"${timeout}" env:"SANDBOX_TIMEOUT" help:"Timeout of a --code-file snippet."`
	MaxTimeout   time.Duration `name:"max-timeout" default:"${max_timeout}" env:"SANDBOX_MAX_TIMEOUT" help:"Longest timeout a job may ask for."`
	MaxOutput    int           `name:"max-output" default:"${max_output}" env:"SANDBOX_MAX_OUTPUT" help:"Bytes of stdout and of stderr kept (head and tail)."`
	MemoryLimit  int64         `name:"memory-limit" default:"0" env:"SANDBOX_MEMORY_LIMIT" help:"Cap the snippet's address space at this many bytes (0: only the cgroup's limit)."`
	MaxProcs     int           `name:"max-procs" default:"0" env:"SANDBOX_MAX_PROCS" help:"RLIMIT_NPROC of the snippet (0: ${max_procs})."`
	PodPidsLimit int64         `name:"pod-pids-limit" default:"0" env:"SANDBOX_POD_PIDS_LIMIT" help:"The pod's process limit (the kubelet's podPidsLimit), which a container cannot read: the snippet's process limit stays below it, so that the runner keeps room (0: only the container's own pids.max)."`
	MaxFileSize  int64         `name:"max-file-size" default:"0" env:"SANDBOX_MAX_FILE_SIZE" help:"Largest file the snippet may write, in bytes (0: ${max_file_size})."`
	Workdir      string        `env:"SANDBOX_WORKDIR" placeholder:"DIR" help:"Working directory of the snippet (default: a fresh temporary directory with --code-file, ${workdir} when serving)."`
	Listen       string        `default:":${runner_port}" env:"SANDBOX_LISTEN" help:"Address to serve the one job on."`
	SandboxID    string        `name:"sandbox-id" env:"SANDBOX_ID" help:"Sandbox id put in the result when serving (default: the host name, which is the pod name)."`
	Call         bool          `name:"call" help:"Tool pod entrypoint: serve one POST /v1/call instead, running the tool with the image's own python3 in the image's working directory (the default --workdir here)."`
	Python       string        `name:"python" placeholder:"PATH" help:"With --call: the interpreter (default python3 from the image's PATH)."`
	SnippetEnv   []string      `name:"snippet-env" env:"SANDBOX_SNIPPET_ENV" sep:"," placeholder:"NAME=VALUE" help:"Add a variable to the snippet's environment (the sandbox image sets MPLBACKEND and MPLCONFIGDIR this way); not one the runner sets itself. Repeatable."`
	SeedTmp      string        `name:"seed-tmp" env:"SANDBOX_SEED_TMP" placeholder:"DIR" help:"When serving: before taking the job, recreate DIR's directories in the pod's temporary directory and link its files there (caches the image built read-only, such as matplotlib's font list)."`

	SealProbe   []string `name:"seal-probe" sep:"," env:"SANDBOX_SEAL_PROBE" placeholder:"HOST:PORT" help:"Addresses the pod must not reach over TCP: the runner is Ready, and takes its job, only while it has proven each refused or silent (default: the API server's Service address from KUBERNETES_SERVICE_HOST/PORT, inside a cluster)."`
	SealDNS     []string `name:"seal-dns" sep:"," env:"SANDBOX_SEAL_DNS" placeholder:"HOST:PORT" help:"Resolvers that must not answer the pod (the cluster DNS, for a sealed pod): part of the same proof."`
	SealICMP    []string `name:"seal-icmp" sep:"," env:"SANDBOX_SEAL_ICMP" placeholder:"ADDR" help:"Addresses an ICMP echo must go unanswered to (the pod's node): part of the same proof. The pod's empty ping_group_range refuses the socket itself."`
	SealDNSName string   `name:"seal-dns-name" default:"${seal_dns_name}" help:"The name --seal-dns resolvers are asked: one they answer themselves, at once."`
	Resolver    string   `name:"resolver" env:"SANDBOX_RESOLVER" placeholder:"HOST:PORT" help:"Answer DNS here, every name NXDOMAIN but localhost, nothing forwarded (${resolver_addr} in a sealed pod, whose resolv.conf names it)."`

	Isolation string `enum:"${isolations}" default:"${isolation}" env:"SANDBOX_ISOLATION" help:"As root, a --code-file snippet runs isolated (its own uid, namespaces, read-only host, private /tmp, cgroups): auto and strict refuse to run it as root any other way; none runs it as a plain process, as root."`

	// For the e2e suite's negative tests only: see package weaken.
	Unsafe []string `name:"unsafe" env:"SANDBOX_UNSAFE" sep:"," hidden:"" placeholder:"NAME" help:"Weaken the runner on purpose (${unsafe_run}), to show that verify catches it. Never in production."`
}

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
	if _, err := weaken.Parse(c.Unsafe, true); err != nil {
		return fmt.Errorf("--unsafe: %w", err)
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

// unsafe is the weakenings asked for; Validate has refused any other name.
func (c *RunCmd) unsafe() weaken.Set {
	s, _ := weaken.Parse(c.Unsafe, true)
	return s
}

// options are the exec options the flags ask for; Dir is left to the form.
func (c *RunCmd) options() exec.Options {
	return exec.Options{MaxOutput: c.MaxOutput, MemoryLimit: c.MemoryLimit, MaxProcs: c.MaxProcs,
		MaxFileSize: c.MaxFileSize, UnsafeKillLeaderOnly: c.unsafe().Has(weaken.KillLeaderOnly)}
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
