package modes

import "time"

// RunCmd runs one snippet: from a file here (--code-file), or as the pod
// entrypoint that takes exactly one job over HTTP and then exits.
type RunCmd struct {
	CodeFile      string        `name:"code-file" env:"SANDBOX_CODE_FILE" placeholder:"FILE" help:"Run this Python file here and print the result JSON (- reads standard input). Without it, serve one job over HTTP."`
	Timeout       time.Duration `default:"${timeout}" env:"SANDBOX_TIMEOUT" help:"Timeout of a --code-file snippet."`
	MaxTimeout    time.Duration `name:"max-timeout" default:"${max_timeout}" env:"SANDBOX_MAX_TIMEOUT" help:"Longest timeout a job may ask for."`
	MaxOutput     int           `name:"max-output" default:"${max_output}" env:"SANDBOX_MAX_OUTPUT" help:"Bytes of stdout and of stderr kept (head and tail)."`
	MemoryLimit   int64         `name:"memory-limit" default:"0" env:"SANDBOX_MEMORY_LIMIT" help:"Cap the snippet's address space at this many bytes (0: only the cgroup's limit)."`
	MaxProcs      int           `name:"max-procs" default:"0" env:"SANDBOX_MAX_PROCS" help:"RLIMIT_NPROC of the snippet (0: ${max_procs})."`
	PodPidsLimit  int64         `name:"pod-pids-limit" default:"0" env:"SANDBOX_POD_PIDS_LIMIT" help:"The pod's process limit (the kubelet's podPidsLimit), which a container cannot read: the snippet's process limit stays below it, so that the runner keeps room (0: only the container's own pids.max)."`
	MaxFileSize   int64         `name:"max-file-size" default:"0" env:"SANDBOX_MAX_FILE_SIZE" help:"Largest file the snippet may write, in bytes (0: ${max_file_size})."`
	Workdir       string        `env:"SANDBOX_WORKDIR" placeholder:"DIR" help:"Working directory of the snippet (default: a fresh temporary directory with --code-file, ${workdir} when serving)."`
	Listen        string        `default:":${runner_port}" env:"SANDBOX_LISTEN" help:"Address to serve the one job on."`
	SandboxID     string        `name:"sandbox-id" env:"SANDBOX_ID" help:"Sandbox id put in the result when serving (default: the host name, which is the pod name)."`
	Call          bool          `name:"call" help:"Tool pod entrypoint: serve one POST /v1/call instead, running the tool with the image's own python3 in the image's working directory (the default --workdir here)."`
	Python        string        `name:"python" placeholder:"PATH" help:"With --call: the interpreter (default python3 from the image's PATH)."`
	SnippetEnv    []string      `name:"snippet-env" env:"SANDBOX_SNIPPET_ENV" sep:"," placeholder:"NAME=VALUE" help:"Add a variable to the snippet's environment (the sandbox image sets MPLBACKEND and MPLCONFIGDIR this way); not one the runner sets itself. Repeatable."`
	Preload       string        `env:"SANDBOX_PRELOAD" placeholder:"MODULES" help:"When serving: modules (comma-separated) the snippet's python3 imports once it is Ready, before its job comes, so that the job's imports of them are free; one that fails to import is skipped and named in the log and /healthz. A job that comes first stops it at the next module. Serve sets it (its --preload)."`
	PreloadAlways bool          `name:"preload-always" env:"SANDBOX_PRELOAD_ALWAYS" help:"When serving: import each module of --preload at once, even while the node is busy; by default each waits until the node's CPUs were idle for a CPU's worth over ${preload_idle_window}, so that a burst's pod starts and jobs keep the CPU. Serve sets it (its --preload-always)."`
	SeedTmp       string        `name:"seed-tmp" env:"SANDBOX_SEED_TMP" placeholder:"DIR" help:"When serving: before taking the job, recreate DIR's directories in the pod's temporary directory and link its files there (caches the image built read-only, such as matplotlib's font list)."`

	SealProbe   []string `name:"seal-probe" sep:"," env:"SANDBOX_SEAL_PROBE" placeholder:"HOST:PORT" help:"Addresses the pod must not reach over TCP: the runner is Ready, and takes its job, only while it has proven each refused or silent (default: the API server's Service address from KUBERNETES_SERVICE_HOST/PORT, inside a cluster)."`
	SealDNS     []string `name:"seal-dns" sep:"," env:"SANDBOX_SEAL_DNS" placeholder:"HOST:PORT" help:"Resolvers that must not answer the pod (the cluster DNS, for a sealed pod): part of the same proof."`
	SealICMP    []string `name:"seal-icmp" sep:"," env:"SANDBOX_SEAL_ICMP" placeholder:"ADDR" help:"Addresses an ICMP echo must go unanswered to (the pod's node): part of the same proof. The pod's empty ping_group_range refuses the socket itself."`
	SealDNSName string   `name:"seal-dns-name" default:"${seal_dns_name}" help:"The name --seal-dns resolvers are asked: one they answer themselves, at once."`
	Resolver    string   `name:"resolver" env:"SANDBOX_RESOLVER" placeholder:"HOST:PORT" help:"Answer DNS here, every name NXDOMAIN but localhost, nothing forwarded (${resolver_addr} in a sealed pod, whose resolv.conf names it)."`

	Isolation string `enum:"${isolations}" default:"${isolation}" env:"SANDBOX_ISOLATION" help:"As root, a --code-file snippet runs isolated (its own uid, namespaces, read-only host, private /tmp, cgroups): auto and strict refuse to run it as root any other way; none runs it as a plain process, as root."`

	// For the e2e suite's negative tests only: see package weaken.
	Weaken []string `name:"weaken" env:"SANDBOX_WEAKEN" sep:"," hidden:"" placeholder:"NAME" help:"Weaken the runner on purpose (${weaken_run}), to show that verify catches it. Never in production."`
}
