package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	osexec "os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandbox/internal/verify/netsec"
	"github.com/sandboxd/sandbox/wire"
)

func statusOf(t *testing.T, rs []Result, name string) Status {
	t.Helper()
	for _, r := range rs {
		if r.Name == name {
			if r.Evidence == "" {
				t.Errorf("%s has no evidence", name)
			}
			return r.Status
		}
	}
	t.Fatalf("no result %s in %+v", name, rs)
	return ""
}

// goodInside is what the inside probe prints in a well-confined sandbox.
const goodInside = `{"probe":"inside","uid":65532,"euid":65532,"gid":65532,"egid":65532,"groups":[65532],
"caps":[{"tid":"1","CapInh":"0000000000000000","CapPrm":"0000000000000000","CapEff":"0000000000000000","CapBnd":"0000000000000000","CapAmb":"0000000000000000"},
        {"tid":"2","CapInh":"0000000000000000","CapPrm":"0000000000000000","CapEff":"0000000000000000","CapBnd":"0000000000000000","CapAmb":"0000000000000000"}],
"raw_socket":{"errno":1,"name":"EPERM"},"no_new_privs":1,"prctl_seccomp":2,"status_nnp":"1","status_seccomp":"2","seccomp_filters":"1",
"machine":"x86_64","kernel":"6.1.0","proc_version":"Linux version 6.1.0","keyctl":{"ret":-1,"errno":1,"name":"EPERM"},
"token_paths":[],"token_mounts":[],"token_env":[],"sockets":[],"runtime_sockets":[],"block_devices":[],"sensitive_devices":[],"kmsg":false,
"sysrq":{"errno":30,"name":"EROFS"},"root_readonly_flag":true,"root_mount":["1 0 0:1 / / ro - overlay overlay ro"],"cwd":"/work",
"writes":{"/work":"written","/tmp":"written","/":"EROFS","/etc":"EROFS","/var/tmp":"EROFS","/dev/shm":"written"}}`

func mutate(t *testing.T, js, path string, v any) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	keys := strings.Split(path, ".")
	cur := m
	for _, k := range keys[:len(keys)-1] {
		cur = cur[k].(map[string]any)
	}
	cur[keys[len(keys)-1]] = v
	b, _ := json.Marshal(m)
	return string(b)
}

func TestEvalInside(t *testing.T) {
	all := []string{"inside/non-root-identity", "inside/no-capabilities", "inside/no-new-privs", "inside/seccomp",
		"inside/no-service-account-token", "inside/no-host-access", "inside/read-only-root"}
	rs := evalInside(gjson.Parse(goodInside), "sb-1", false)
	for _, n := range all {
		if st := statusOf(t, rs, n); st != Pass {
			t.Errorf("good sandbox: %s = %s", n, st)
		}
	}
	for _, tc := range []struct {
		name, path string
		v          any
		check      string
		want       Status
	}{
		{"root uid", "uid", 0, "inside/non-root-identity", Fail},
		{"group 0", "groups", []int{65532, 0}, "inside/non-root-identity", Fail},
		{"a capability", "caps", []map[string]string{{"tid": "1", "CapInh": "0", "CapPrm": "0", "CapEff": "0000000000002000", "CapBnd": "0", "CapAmb": "0"}, {"tid": "2", "CapInh": "0", "CapPrm": "0", "CapEff": "0", "CapBnd": "0", "CapAmb": "0"}}, "inside/no-capabilities", Fail},
		{"one thread only", "caps", []map[string]string{{"tid": "1", "CapInh": "0", "CapPrm": "0", "CapEff": "0", "CapBnd": "0", "CapAmb": "0"}}, "inside/no-capabilities", Fail},
		{"raw socket opened", "raw_socket", map[string]bool{"opened": true}, "inside/no-capabilities", Fail},
		{"no_new_privs 0", "no_new_privs", 0, "inside/no-new-privs", Fail},
		{"no seccomp", "prctl_seccomp", 0, "inside/seccomp", Pass}, // /proc still says 2: mutate both below
		{"keyctl allowed", "keyctl", map[string]any{"ret": 12345, "errno": 0, "name": ""}, "inside/seccomp", Fail},
		{"keyctl ENOSYS", "keyctl", map[string]any{"ret": -1, "errno": 38, "name": "ENOSYS"}, "inside/seccomp", Inconclusive},
		{"token mounted", "token_paths", []string{"/var/run/secrets/kubernetes.io/serviceaccount"}, "inside/no-service-account-token", Fail},
		{"runtime socket", "runtime_sockets", []string{"/run/containerd/containerd.sock"}, "inside/no-host-access", Fail},
		{"block device", "block_devices", []string{"/dev/vda"}, "inside/no-host-access", Fail},
		{"sysrq", "sysrq", map[string]bool{"opened": true}, "inside/no-host-access", Fail},
		{"root writable", "root_readonly_flag", false, "inside/read-only-root", Fail},
		{"etc written", "writes", map[string]string{"/work": "written", "/tmp": "written", "/etc": "written"}, "inside/read-only-root", Fail},
		{"nothing writable", "writes", map[string]string{"/work": "EROFS", "/tmp": "EROFS", "/etc": "EROFS"}, "inside/read-only-root", Inconclusive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := mutate(t, goodInside, tc.path, tc.v)
			if st := statusOf(t, evalInside(gjson.Parse(js), "sb", false), tc.check); st != tc.want {
				t.Errorf("%s = %s, want %s", tc.check, st, tc.want)
			}
		})
	}
	js := mutate(t, mutate(t, goodInside, "prctl_seccomp", 0), "status_seccomp", "0")
	if st := statusOf(t, evalInside(gjson.Parse(js), "sb", false), "inside/seccomp"); st != Fail {
		t.Errorf("seccomp disabled = %s", st)
	}
	if st := statusOf(t, evalInside(gjson.Parse(js), "sb", true), "inside/seccomp"); st != Pass {
		t.Errorf("gVisor with keyctl refused = %s", st)
	}
}

// TestInsideSnippetHere runs the real snippet on this machine, which is no
// sandbox: it must parse, and judge this process as it is.
func TestInsideSnippetHere(t *testing.T) {
	if _, err := osexec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	cmd := osexec.Command("python3", "-")
	cmd.Stdin = strings.NewReader(insideScript)
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inside.py: %v\n%s", err, out)
	}
	a := &answer{Status: http.StatusOK, Result: wire.Result{SandboxID: "here", Process: wire.Process{Stdout: string(out)}}}
	j, err := snippetJSON(a, nil, "inside")
	if err != nil {
		t.Fatal(err)
	}
	rs := evalInside(j, "here", false)
	want := Pass
	if os.Getuid() == 0 {
		want = Fail
	}
	if st := statusOf(t, rs, "inside/non-root-identity"); st != want {
		t.Errorf("identity of uid %d = %s", os.Getuid(), st)
	}
	if os.Getuid() == 0 {
		for _, n := range []string{"inside/no-capabilities", "inside/read-only-root"} {
			if st := statusOf(t, rs, n); st != Fail {
				t.Errorf("root on a writable host: %s = %s", n, st)
			}
		}
	}
}

func TestSnippetJSON(t *testing.T) {
	ok := func(stdout string) *answer {
		return &answer{Status: 200, Result: wire.Result{SandboxID: "s", Process: wire.Process{Stdout: stdout}}}
	}
	for name, tc := range map[string]struct {
		a   *answer
		err error
	}{
		"transport error": {nil, errors.New("connection reset")},
		"HTTP 500":        {&answer{Status: 500, Err: "boom"}, nil},
		"empty stdout":    {ok(""), nil},
		"traceback":       {ok("Traceback (most recent call last):\n"), nil},
		"wrong probe":     {ok(`{"probe":"other"}`), nil},
		"half a line":     {ok(`{"probe":"inside",`), nil},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := snippetJSON(tc.a, tc.err, "inside"); err == nil {
				t.Error("accepted")
			}
		})
	}
	a := &answer{Status: 200, Body: `{"stdout":"x"}`}
	if err := decodeAnswer(a); err == nil {
		t.Error("a 200 without sandbox_id was accepted")
	}
	a = &answer{Status: 200, Body: ""}
	if err := decodeAnswer(a); err == nil {
		t.Error("an empty 200 was accepted")
	}
}

func treeAnswer(stdout, stderr string, exit int, timedOut bool, ms int64) *answer {
	return &answer{Status: 200, Elapsed: time.Duration(ms) * time.Millisecond,
		Result: wire.Result{SandboxID: "sb", Process: wire.Process{Stdout: stdout, Stderr: stderr, ExitCode: exit, TimedOut: timedOut, DurationMS: ms}}}
}

func TestJudgeTimeout(t *testing.T) {
	early := "STARTED 0.02\nHB sigterm-ignorer 0.10\nHB heartbeat 0.11\nHB sigterm-ignorer 1.90\n"
	earlyErr := "HB setsid-grandchild 0.12\nHB setsid-grandchild 1.95\ntimed out after 2s\n"
	for _, tc := range []struct {
		name string
		a    *answer
		err  error
		want Status
	}{
		{"tree killed at the deadline", treeAnswer(early, earlyErr, -1, true, 2040), nil, Pass},
		{"survivor heard late", treeAnswer(early+"HB heartbeat 5.3\n", earlyErr, -1, true, 2040), nil, Fail},
		{"answer waited for the pipes", treeAnswer(early, earlyErr, -1, true, 8100), nil, Fail},
		{"not a timeout", treeAnswer(early, earlyErr, 0, false, 2040), nil, Fail},
		{"survivors never started", treeAnswer("STARTED 0.02\n", "timed out after 2s", -1, true, 2040), nil, Inconclusive},
		{"no answer", nil, errors.New("EOF"), Fail},
		{"HTTP 500", &answer{Status: 500, Err: "runner died"}, nil, Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeTree(tc.a, tc.err); got.Status != tc.want {
				t.Errorf("%s: %s", got.Status, got.Evidence)
			}
		})
	}
	for _, tc := range []struct {
		name string
		a    *answer
		want Status
	}{
		{"documented answer", treeAnswer("", "timed out after 2s\n", -1, true, 2003), Pass},
		{"wrong exit", treeAnswer("", "timed out after 2s", 137, true, 2003), Fail},
		{"wrong message", treeAnswer("", "killed", -1, true, 2003), Fail},
		{"too slow", treeAnswer("", "timed out after 2s", -1, true, 9000), Fail},
	} {
		t.Run("spin/"+tc.name, func(t *testing.T) {
			if got := judgeSpin(tc.a, nil); got.Status != tc.want {
				t.Errorf("%s: %s", got.Status, got.Evidence)
			}
		})
	}
}

// TestTreeSnippetHere runs the tree snippet under a parent that kills only
// the leader, the weakened runner's behaviour, and checks that the heartbeats
// it leaves make judgeTree fail.
func TestTreeSnippetHere(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a few seconds")
	}
	if _, err := osexec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	code := strings.NewReplacer("%(life)f", "4.0", "%%", "%").Replace(treeScript)
	cmd := osexec.Command("python3", "-c", code)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	_ = cmd.Process.Kill() // the leader only; Wait then waits for the pipes, as a naive runner does
	start := time.Now()
	_ = cmd.Wait()
	waited := time.Since(start)
	a := treeAnswer(stdout.String(), stderr.String()+"timed out after 2s", -1, true, (2*time.Second + waited).Milliseconds())
	got := judgeTree(a, nil)
	if got.Status != Fail {
		t.Errorf("leader-only kill judged %s: %s", got.Status, got.Evidence)
	}
	if !strings.Contains(got.Evidence, "setsid-grandchild") || !strings.Contains(got.Evidence, "heartbeat") {
		t.Errorf("evidence does not name the survivors: %s", got.Evidence)
	}
}

func TestJudgeFloodAndRSS(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name string
		r    wire.Result
		want Status
	}{
		{"bounded", wire.Result{Process: wire.Process{Stdout: big, StdoutTruncated: true}}, Pass},
		{"no flag", wire.Result{Process: wire.Process{Stdout: big}}, Fail},
		{"oom", wire.Result{Process: wire.Process{OOMKilled: true, ExitCode: 137}}, Fail},
		{"nothing kept", wire.Result{Process: wire.Process{StdoutTruncated: true}}, Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeFlood(&answer{Status: 200, Result: tc.r}, nil); got.Status != tc.want {
				t.Errorf("%s: %s", got.Status, got.Evidence)
			}
		})
	}
	n, err := parseRSS("# HELP x\nprocess_resident_memory_bytes 2.5165824e+07\nprocess_start_time_seconds 1\n")
	if err != nil || n != 25165824 {
		t.Errorf("parseRSS = %d, %v", n, err)
	}
	if _, err := parseRSS("go_goroutines 3\n"); err == nil {
		t.Error("missing metric accepted")
	}
}

func TestJudgePSA(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x",
		errors.New(`violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false`))
	other := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("exceeded quota"))
	for _, tc := range []struct {
		name      string
		level     string
		bad, good error
		want      Status
	}{
		{"restricted enforced", "restricted", forbidden, nil, Pass},
		{"admitted", "baseline", nil, nil, Fail},
		{"refused by something else", "restricted", other, nil, Inconclusive},
		{"compliant refused too", "restricted", forbidden, forbidden, Inconclusive},
		{"refused but label not restricted", "", forbidden, nil, Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgePSA(tc.level, tc.bad, tc.good); got.Status != tc.want {
				t.Errorf("%s: %s", got.Status, got.Evidence)
			}
		})
	}
}

func goodPod() *corev1.Pod {
	f, tr := false, true
	uid := int64(65532)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-abc"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &f, EnableServiceLinks: &f,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &tr, RunAsUser: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "runner",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &tr,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("512Mi"), corev1.ResourceCPU: resource.MustParse("1")}},
			}},
		},
	}
}

// podCase is one edit of goodPod and the status a judgement must give it.
type podCase struct {
	name string
	edit func(*corev1.Pod)
	want Status
}

// runPodCases judges goodPod, edited by each case, and checks the status,
// the check's name and that the evidence is there.
func runPodCases(t *testing.T, name string, judge func(*corev1.Pod) Result, cases []podCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := goodPod()
			tc.edit(p)
			got := judge(p)
			if got.Name != name || got.Evidence == "" {
				t.Errorf("result %q with evidence %q", got.Name, got.Evidence)
			}
			if got.Status != tc.want {
				t.Errorf("%s, want %s: %s", got.Status, tc.want, got.Evidence)
			}
		})
	}
}

func TestJudgePodContainers(t *testing.T) {
	root := int64(0)
	f, tr := false, true
	runPodCases(t, podSpecContainer, judgePodContainers, []podCase{
		{"good", func(*corev1.Pod) {}, Pass},
		{"root", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = &root }, Fail},
		{"image user, runAsNonRoot unset", func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsUser, p.Spec.SecurityContext.RunAsNonRoot = nil, nil
		}, Fail},
		{"image user, runAsNonRoot", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = nil }, Pass},
		{"container overrides runAsNonRoot", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.RunAsNonRoot = &f
		}, Fail},
		{"privilege escalation unset", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		}, Fail},
		{"privileged", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Privileged = &tr }, Fail},
		{"capabilities kept", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Capabilities = nil }, Fail},
		{"cap added", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
		}, Fail},
		{"no seccomp", func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil }, Fail},
		{"seccomp unconfined", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, Fail},
		{"seccomp localhost", func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeLocalhost
		}, Pass},
		{"writable root", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem = &f }, Fail},
		{"host port", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
		}, Fail},
		{"container port", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
		}, Pass},
		{"init container unconfined", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
		}, Fail},
		{"ephemeral container unconfined", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}}
		}, Fail},
	})
}

func TestJudgePodIsolation(t *testing.T) {
	tr := true
	runPodCases(t, podSpecIsolation, judgePodIsolation, []podCase{
		{"good", func(*corev1.Pod) {}, Pass},
		{"host users: not required", func(p *corev1.Pod) { p.Spec.HostUsers = &tr }, Pass},
		{"token", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = &tr }, Fail},
		{"token unset", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }, Fail},
		{"service links unset", func(p *corev1.Pod) { p.Spec.EnableServiceLinks = nil }, Fail},
		{"host network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, Fail},
		{"host PID", func(p *corev1.Pod) { p.Spec.HostPID = true }, Fail},
		{"host IPC", func(p *corev1.Pod) { p.Spec.HostIPC = true }, Fail},
		{"host path", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, Fail},
		{"projected token", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		}, Fail},
		{"secret", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}}}
		}, Fail},
		{"empty dir", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, Pass},
	})
}

func TestJudgePodResources(t *testing.T) {
	gvisor := "gvisor"
	judge := func(runtimeClass string) func(*corev1.Pod) Result {
		return func(p *corev1.Pod) Result { return judgePodResources(p, "512Mi", runtimeClass) }
	}
	runPodCases(t, podSpecResources, judge(""), []podCase{
		{"good", func(*corev1.Pod) {}, Pass},
		{"1Gi", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
		}, Fail},
		{"no memory limit", func(p *corev1.Pod) { delete(p.Spec.Containers[0].Resources.Limits, corev1.ResourceMemory) }, Fail},
		{"no cpu limit", func(p *corev1.Pod) { delete(p.Spec.Containers[0].Resources.Limits, corev1.ResourceCPU) }, Fail},
		{"runtime class, none configured", func(p *corev1.Pod) { p.Spec.RuntimeClassName = &gvisor }, Pass},
	})
	t.Run("runtime class configured", func(t *testing.T) {
		runPodCases(t, podSpecResources, judge(gvisor), []podCase{
			{"missing", func(*corev1.Pod) {}, Fail},
			{"set", func(p *corev1.Pod) { p.Spec.RuntimeClassName = &gvisor }, Pass},
		})
	})
}

func TestReviewRBAC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		allow func(a *authv1.ResourceAttributes) bool
		want  Status
	}{
		{"least privilege", func(a *authv1.ResourceAttributes) bool {
			return a.Resource == "pods" && a.Subresource == "" && a.Namespace == "sandbox" || reviewsTokens(a)
		}, Pass},
		{"cannot review tokens", func(a *authv1.ResourceAttributes) bool {
			return a.Resource == "pods" && a.Subresource == "" && a.Namespace == "sandbox"
		}, Inconclusive},
		{"can exec", func(a *authv1.ResourceAttributes) bool {
			return a.Resource == "pods" && a.Namespace == "sandbox" || reviewsTokens(a)
		}, Fail},
		{"reads secrets", func(a *authv1.ResourceAttributes) bool {
			return a.Namespace == "sandbox" && (a.Resource == "pods" && a.Subresource == "" || a.Resource == "secrets") || reviewsTokens(a)
		}, Fail},
		{"positive control fails", func(*authv1.ResourceAttributes) bool { return false }, Inconclusive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			cs.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
				sar := action.(k8stesting.CreateAction).GetObject().(*authv1.SubjectAccessReview)
				if sar.Spec.User != "system:serviceaccount:sandbox:sandbox" {
					return true, nil, fmt.Errorf("unexpected user %q", sar.Spec.User)
				}
				sar.Status.Allowed = tc.allow(sar.Spec.ResourceAttributes)
				return true, sar, nil
			})
			got := reviewRBAC(t.Context(), cs, "sandbox", "sandbox")
			if got.Status != tc.want {
				t.Errorf("%s: %s", got.Status, got.Evidence)
			}
		})
	}
}

// reviewsTokens is serve's one cluster-wide right that is not read-only.
func reviewsTokens(a *authv1.ResourceAttributes) bool {
	return a.Resource == "tokenreviews" && a.Verb == "create" && a.Namespace == ""
}

func TestJudgeNetwork(t *testing.T) {
	canary := netTarget{Target: netsec.Target{Name: "network/canary-pod", Kind: netsec.HTTP, Host: "10.0.0.9", Port: 8080, Token: "t"}, check: "network/canary-pod", property: "13"}
	dns := netTarget{Target: netsec.Target{Name: "network/dns-cluster-udp", Kind: netsec.DNSUDP, Host: "10.96.0.10", Port: 53, QName: "k"}, check: "network/dns-cluster-udp", property: "14", allowed: true}
	r0 := netTarget{Target: netsec.Target{Name: "other#0", Kind: netsec.HTTP, Host: "10.0.0.1", Port: 8080, SkipSelf: true}, check: "network/other-sandbox-runner", property: "13", viaServe: true}
	r1 := r0
	r1.Name, r1.Host = "other#1", "10.0.0.2"
	reachedTok := &netsec.Outcome{Reached: true, Answered: true, Token: true, Attempts: 1}
	reached := &netsec.Outcome{Reached: true, Answered: true, Attempts: 1}
	refused := &netsec.Outcome{Attempts: 12, Error: "ConnectionRefusedError(111)"}
	self := &netsec.Outcome{Skipped: "own address"}

	run := &netRun{
		targets: []netTarget{canary, dns, r0, r1},
		control: map[string]*netsec.Outcome{canary.Name: reachedTok, dns.Name: reached, r0.Name: reached, r1.Name: reached},
		sandbox: &netsec.Report{Outcomes: map[string]*netsec.Outcome{canary.Name: refused, dns.Name: reached, r0.Name: self, r1.Name: refused}},
	}
	rs := judgeNetwork(run)
	for _, n := range []string{"network/canary-pod", "network/dns-cluster-udp", "network/other-sandbox-runner"} {
		if st := statusOf(t, rs, n); st != Pass {
			t.Errorf("%s = %s: %+v", n, st, rs)
		}
	}
	run.sandbox.Outcomes[r1.Name] = reached
	run.sandbox.Outcomes[dns.Name] = refused
	run.control[canary.Name] = refused
	rs = judgeNetwork(run)
	if st := statusOf(t, rs, "network/other-sandbox-runner"); st != Fail {
		t.Errorf("sandbox reached another sandbox: %s", st)
	}
	if st := statusOf(t, rs, "network/dns-cluster-udp"); st != Fail {
		t.Errorf("DNS refused: %s", st)
	}
	if st := statusOf(t, rs, "network/canary-pod"); st != Inconclusive {
		t.Errorf("control missed: %s", st)
	}
	run.sandbox = nil
	run.sbErr = errors.New("HTTP 500")
	for _, r := range judgeNetwork(run) {
		if r.Status != Fail {
			t.Errorf("no sandbox answer: %s = %s", r.Name, r.Status)
		}
	}
}

func TestJudgeReuse(t *testing.T) {
	r1 := gjson.Parse(`{"hostname":"a","paths":["/work/verify-x","/tmp/verify-x"],"written":[true,true]}`)
	for _, tc := range []struct {
		name       string
		id2, r2    string
		uid1, uid2 string
		want       Status
	}{
		{"fresh pod", "b", `{"hostname":"b","present":[]}`, "u1", "u2", Pass},
		{"same id", "a", `{"hostname":"b","present":[]}`, "u1", "u2", Fail},
		{"same host", "b", `{"hostname":"a","present":[]}`, "u1", "u2", Fail},
		{"file survived", "b", `{"hostname":"b","present":["/tmp/verify-x"]}`, "u1", "u2", Fail},
		{"same uid", "b", `{"hostname":"b","present":[]}`, "u1", "u1", Fail},
		{"uid unknown", "b", `{"hostname":"b","present":[]}`, "", "u2", Inconclusive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeReuse("a", tc.id2, r1, gjson.Parse(tc.r2), tc.uid1, tc.uid2); got.Status != tc.want {
				t.Errorf("%s: %s", got.Status, got.Evidence)
			}
		})
	}
	unwritten := gjson.Parse(`{"hostname":"a","paths":["/work/x"],"written":["Read-only file system"]}`)
	if got := judgeReuse("a", "b", unwritten, gjson.Parse(`{"hostname":"b","present":[]}`), "u1", "u2"); got.Status != Inconclusive {
		t.Errorf("unwritten markers: %s", got.Status)
	}
}

// TestInsideGolden judges answers the real snippet gave: in a hardened
// Docker container (read-only root, no capabilities, no_new_privs, seccomp,
// uid 65532; its /work was a root-owned tmpfs, so not writable) and on this
// development host as root (nothing confined).
func TestInsideGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[string]Status
	}{
		{"testdata/inside-hardened-docker.json", map[string]Status{
			"inside/non-root-identity": Pass, "inside/no-capabilities": Pass, "inside/no-new-privs": Pass,
			"inside/seccomp": Pass, "inside/no-service-account-token": Pass, "inside/no-host-access": Pass,
			"inside/read-only-root": Inconclusive,
		}},
		{"testdata/inside-host-root.json", map[string]Status{
			"inside/non-root-identity": Fail, "inside/no-capabilities": Fail, "inside/no-new-privs": Fail,
			"inside/seccomp": Fail, "inside/no-service-account-token": Pass, "inside/no-host-access": Fail,
			"inside/read-only-root": Fail,
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			a := &answer{Status: http.StatusOK, Result: wire.Result{SandboxID: "golden", Process: wire.Process{Stdout: string(b)}}}
			j, err := snippetJSON(a, nil, "inside")
			if err != nil {
				t.Fatal(err)
			}
			rs := evalInside(j, "golden", false)
			for name, want := range tc.want {
				if got := statusOf(t, rs, name); got != want {
					t.Errorf("%s = %s, want %s", name, got, want)
				}
			}
		})
	}
}

func TestJudgeForkBombAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *answer
		err  error
		want Status
	}{
		{"timed out in time", treeAnswer("", "timed out after 5s\n", -1, true, 6200), nil, Pass},
		{"answered late", treeAnswer("", "timed out after 5s\n", -1, true, 12000), nil, Fail},
		{"the runner died", &answer{Status: 502, Err: "sandbox pod x died during the run: the runner exited with code 2", Elapsed: 3 * time.Second}, nil, Fail},
		{"no answer", nil, errors.New("context deadline exceeded"), Fail},
		{"ended cleanly", treeAnswer("", "", 0, false, 100), nil, Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeForkBombAnswer(tc.a, tc.err, "a warm pod after 0s"); got.Status != tc.want {
				t.Errorf("status %s, want %s: %s", got.Status, tc.want, got.Evidence)
			}
		})
	}
}

func TestJudgeProcessLimit(t *testing.T) {
	line := func(pids string, nproc int) *answer {
		return treeAnswer(fmt.Sprintf(`{"probe": "process-limits", "pids_max": %q, "rlimit_nproc": %d}`+"\n", pids, nproc), "", 0, false, 80)
	}
	unknown := errors.New("forbidden")
	for _, tc := range []struct {
		name    string
		a       *answer
		kubelet map[string]int64
		kerr    error
		want    Status
	}{
		{"kubelet limit with the reserve kept", line("max", 960), map[string]int64{"n1": 1024}, nil, Pass},
		{"the smallest node limit counts", line("max", 960), map[string]int64{"n1": 4096, "n2": 900}, nil, Fail},
		{"no kubelet limit", line("max", 1024), map[string]int64{"n1": -1}, nil, Fail},
		{"snippet may take the whole pod", line("max", 1024), map[string]int64{"n1": 1024}, nil, Fail},
		{"inside view: reserve below pids.max", line("1024", 960), nil, unknown, Pass},
		{"inside view: no pod limit", line("max", 1024), nil, unknown, Fail},
		{"inside view: snippet may take the whole pod", line("1024", 1024), nil, unknown, Fail},
		{"no limits line", treeAnswer("", "", 0, false, 80), map[string]int64{"n1": 1024}, nil, Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeProcessLimit(tc.a, nil, tc.kubelet, tc.kerr); got.Status != tc.want {
				t.Errorf("status %s, want %s: %s", got.Status, tc.want, got.Evidence)
			}
		})
	}
}
