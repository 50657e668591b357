package modes

import (
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/local"
	"github.com/sandboxd/sandbox/internal/manifests"
	"github.com/sandboxd/sandbox/internal/policy"
	"github.com/sandboxd/sandbox/internal/pool"
	"github.com/sandboxd/sandbox/internal/seal"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/toolpod"
	"github.com/sandboxd/sandbox/internal/verify"
	"github.com/sandboxd/sandbox/internal/weaken"
)

// defaultListen is where serve listens and where exec looks for it by
// default: this machine only, since the local backend has no
// authentication by default.
const defaultListen = "127.0.0.1:8080"

// vars feeds the flags' defaults and help from the constants that define
// them, so that each number is written once: a tag says default:"${name}"
// and kong fills it in.
func vars() kong.Vars {
	return kong.Vars{
		"listen":               defaultListen,
		"auth_audience":        auth.DefaultAudience,
		"policy_configmap":     policy.ConfigMap,
		"token_file":           client.DefaultTokenFile,
		"max_body":             strconv.Itoa(api.DefaultMaxBody),
		"shutdown_timeout":     seconds(server.DefaultShutdownTimeout),
		"queue_wait":           seconds(local.DefaultQueueWait),
		"memory_limit_mb":      strconv.Itoa(local.DefaultMemoryLimit >> 20),
		"isolation":            local.IsolationAuto,
		"warm":                 strconv.Itoa(local.DefaultWarm),
		"isolations":           strings.Join([]string{local.IsolationAuto, local.IsolationStrict, local.IsolationNone}, ","),
		"pool_size":            strconv.Itoa(pool.DefaultSize),
		"pool_max_factor":      strconv.Itoa(pool.DefaultMaxFactor),
		"pool_wait":            seconds(pool.DefaultWait),
		"runner_port":          strconv.Itoa(kube.DefaultRunnerPort),
		"pod_pids_limit":       strconv.Itoa(kube.DefaultPodPidsLimit),
		"workdir":              kube.Workdir,
		"snippet_cpu":          kube.SnippetCPU,
		"snippet_memory":       kube.SnippetMemory,
		"image":                manifests.DefaultImage,
		"namespace":            manifests.DefaultNamespace,
		"api_server_cidrs":     strings.Join(manifests.DefaultAPIServerCIDRs, ","),
		"timeout":              seconds(exec.DefaultTimeout),
		"max_timeout":          seconds(api.MaxTimeoutS * time.Second),
		"max_output":           strconv.Itoa(exec.DefaultMaxOutput),
		"max_procs":            strconv.Itoa(exec.DefaultMaxProcs),
		"max_file_size":        strconv.Itoa(exec.DefaultMaxFileSize),
		"preload":              exec.DefaultPreload,
		"preload_idle_window":  exec.PreloadIdleWindow.String(),
		"verify_name":          verify.DefaultName,
		"verify_caller":        verify.DefaultCaller,
		"cluster_domain":       verify.DefaultClusterDomain,
		"parallel":             strconv.Itoa(verify.DefaultParallel),
		"verify_timeout":       seconds(verify.DefaultTimeout),
		"weaken_serve":         weaken.List(false),
		"weaken_run":           weaken.List(true),
		"weaken_gateway":       weaken.ListGateway(),
		"egress_allowed":       verify.DefaultEgressAllowed,
		"egress_other":         verify.DefaultEgressOther,
		"egress_rebind":        strings.Join(verify.DefaultEgressRebind, ","),
		"tool_env_deny":        strings.Join(api.DefaultEnvDeny, ","),
		"tool_ready_timeout":   seconds(kube.ToolReadyTimeout),
		"tool_max_concurrent":  strconv.Itoa(toolpod.DefaultMaxConcurrent),
		"egress_service":       toolpod.DefaultGatewayService,
		"egress_port":          strconv.Itoa(toolpod.DefaultGatewayPort),
		"egress_max_conns":     strconv.Itoa(egress.DefaultMaxConnsPerPod),
		"egress_max_bytes_out": strconv.Itoa(egress.DefaultMaxBytesOutPerPod),
		"snippet_dns":          kube.DefaultDNS,
		"snippet_dns_modes":    strings.Join(kube.DNSModes, ","),
		"seal_dns_name":        seal.ProbeName,
		"resolver_addr":        seal.ResolverAddr,
		"call_timeout":         seconds(api.DefaultCallTimeoutS * time.Second),
		"max_call_timeout":     seconds(api.MaxCallTimeoutS * time.Second),
	}
}

// seconds writes d as a flag's default the way a user would type it: in
// seconds ("60s", not "1m0s"), or whole minutes from ten minutes up ("10m").
func seconds(d time.Duration) string {
	if d >= 10*time.Minute && d%time.Minute == 0 {
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}
