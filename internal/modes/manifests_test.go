package modes

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestManifestsMode(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"manifests", "--image", "reg.example/sandbox:v2", "--namespace", "sb", "--pool-size", "5", "--pool-max", "17",
		"--runtime-class", "gvisor", "--pod-cpu-request", "250m", "--api-server-cidr", "192.0.2.1/32,198.51.100.0/24",
		"--snippet-dns", "cluster"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"kind: Namespace", "name: sb\n", "image: reg.example/sandbox:v2", "value: \"5\"", "value: \"17\"", "value: gvisor", "value: 250m",
		"cidr: 192.0.2.1/32", "cidr: 198.51.100.0/24", "kind: NetworkPolicy", "kind: Role\n",
		"name: SANDBOX_SNIPPET_DNS\n          value: cluster", "name: sandbox-runner-dns",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(s, "namespace: sandbox") {
		t.Error("an object stayed in namespace sandbox")
	}
}

func TestManifestsModeRejectsBadCIDR(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"manifests", "--api-server-cidr", "10.96.0.1"}, &out, &errb); code == 0 {
		t.Fatal("bad CIDR accepted")
	}
	if out.Len() != 0 {
		t.Errorf("printed manifests despite the error:\n%s", out.String())
	}
}

func TestNewKubeBackendValidates(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // outside a cluster, whatever runs the test
	for name, f := range map[string]KubeFlags{
		"pool size":   {Image: "x", PoolSize: 0, PoolWait: 1, RunnerPort: 8080},
		"pool max":    {Image: "x", PoolSize: 3, PoolMax: 2, PoolWait: 1, RunnerPort: 8080},
		"pool max <0": {Image: "x", PoolSize: 3, PoolMax: -1, PoolWait: 1, RunnerPort: 8080},
		"pool wait":   {Image: "x", PoolSize: 1, PoolWait: 0, RunnerPort: 8080},
		"runner port": {Image: "x", PoolSize: 1, PoolWait: 1, RunnerPort: 70000},
		"image":       {PoolSize: 1, PoolWait: 1, RunnerPort: 8080},
		"weakened":    {Image: "x", PoolSize: 1, PoolWait: 1, RunnerPort: 8080, Weaken: []string{"everything"}},
		"cpu request": {Image: "x", PoolSize: 1, PoolWait: 1, RunnerPort: 8080, CPURequest: "4"},
		"snippet dns": {Image: "x", PoolSize: 1, PoolWait: 1, RunnerPort: 8080, SnippetDNS: "open"},
		// Outside a cluster there is no address to prove a pod's egress cut
		// against unless one is given: no pod could ever be Ready.
		"no seal probe": {Image: "x", PoolSize: 1, PoolWait: 1, RunnerPort: 8080},
		"seal probe":    {Image: "x", PoolSize: 1, PoolWait: 1, RunnerPort: 8080, SealProbe: []string{"10.96.0.1"}},
	} {
		if _, _, err := newKubeBackend(&f, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%s: accepted %+v", name, f)
		}
	}
}

func TestNewKubeBackendRejectsBadPreload(t *testing.T) {
	f := KubeFlags{Image: "x", PoolSize: 1, PoolWait: 1, RunnerPort: 8080, Preload: "numpy,os;print(1)"}
	if _, _, err := newKubeBackend(&f, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--preload") {
		t.Errorf("newKubeBackend = %v, want --preload refused", err)
	}
}

func TestManifestsModeRejectsBadSnippetDNS(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"manifests", "--snippet-dns", "open"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "snippet-dns") {
		t.Fatalf("exit %d, stderr %q: want --snippet-dns refused", code, errb.String())
	}
}

func TestRunRejectsBadSealAddress(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"run", "--seal-probe", "10.96.0.1"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "--seal-probe") {
		t.Fatalf("exit %d, stderr %q: want the address refused", code, errb.String())
	}
}
