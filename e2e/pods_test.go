//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/e2e-framework/klient/k8s/resources"
	"sigs.k8s.io/e2e-framework/klient/wait"
	"sigs.k8s.io/e2e-framework/klient/wait/conditions"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// canaryPort is where in-cluster canary pods answer HTTP.
const canaryPort = 8080

// restrictedContainer returns a container that Pod Security "restricted"
// admits, running the sandbox image with command.
func restrictedContainer(image string, command ...string) corev1.Container {
	return corev1.Container{
		Name:            "main",
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         command,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// sleeperPod is a pod that only waits, to exec probes in.
func sleeperPod(ns, name, image string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{
				restrictedContainer(image, "python3", "-c", "import time; time.sleep(3600)"),
			},
		},
	}
}

// canaryPod answers every GET on canaryPort with kindenv.CanaryToken.
func canaryPod(ns, name, image string) *corev1.Pod {
	p := sleeperPod(ns, name, image, map[string]string{"app": name})
	script := fmt.Sprintf(`import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b"%s in-cluster\n"
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
http.server.ThreadingHTTPServer(("", %d), H).serve_forever()
`, kindenv.CanaryToken, canaryPort)
	p.Spec.Containers[0].Command = []string{"python3", "-c", script}
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstrPort(canaryPort)}},
		PeriodSeconds: 1,
	}
	return p
}

// createReady creates pod and waits until it is Ready, returning it fresh.
func createReady(ctx context.Context, t *testing.T, cfg *envconf.Config, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	r := cfg.Client().Resources()
	if err := r.Create(ctx, pod); err != nil {
		t.Fatalf("create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	if err := wait.For(conditions.New(r).PodReady(pod),
		wait.WithContext(ctx), wait.WithTimeout(2*time.Minute), wait.WithInterval(500*time.Millisecond)); err != nil {
		t.Fatalf("pod %s/%s not ready: %v", pod.Namespace, pod.Name, err)
	}
	if err := r.Get(ctx, pod.Name, pod.Namespace, pod); err != nil {
		t.Fatalf("get pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return pod
}

// probeScript fetches argv[1] and prints the body; any failure exits non-zero
// with the error on stderr.
const probeScript = `import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode())`

// probe is one attempt to fetch url from inside a pod.
type probe struct {
	reached bool   // the canary answered with its token
	detail  string // what answered, or the error
	took    time.Duration
}

func (p probe) String() string {
	state := "blocked"
	if p.reached {
		state = "reached"
	}
	return fmt.Sprintf("%s in %s (%s)", state, p.took.Round(time.Millisecond), strings.TrimSpace(p.detail))
}

// fetchFrom runs probeScript in pod against url.
func fetchFrom(ctx context.Context, r *resources.Resources, pod *corev1.Pod, url string) probe {
	var stdout, stderr bytes.Buffer
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := r.ExecInPod(ctx, pod.Namespace, pod.Name, "main", []string{"python3", "-c", probeScript, url}, &stdout, &stderr)
	p := probe{took: time.Since(start), detail: stdout.String()}
	switch {
	case err != nil:
		p.detail = fmt.Sprintf("%v: %s", err, lastLine(stderr.String()))
	case strings.Contains(stdout.String(), kindenv.CanaryToken):
		p.reached = true
	default:
		p.detail = "answer without the canary token: " + stdout.String()
	}
	return p
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
