package verify

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/verify/netsec"
)

type probeResolver map[string]netip.Addr

func (m probeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[strings.TrimSuffix(host, ".")]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestEgressProbeThroughTheGateway runs verify's egress probe as a tool
// pod would (python3, HTTPS_PROXY naming the gateway) through a real
// gateway in front of a real TLS server on 127.0.0.1, and judges what it
// printed: the probe, the gateway and the judges must agree on what a
// refusal looks like.
func TestEgressProbeThroughTheGateway(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	const token = "sandbox-canary"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s tls %s\n", token, r.Host)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	allowed, other, rebind := "allowed.test:"+strconv.Itoa(port), "other.test:"+strconv.Itoa(port), "rebind.test:"+strconv.Itoa(port)

	cs := fake.NewClientset()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-tool-abcde", Namespace: "sandbox", UID: "u1",
		Labels:      map[string]string{kube.LabelName: kube.RunnerName, kube.LabelKind: kube.KindTool, kube.LabelEgress: kube.EgressGateway},
		Annotations: map[string]string{kube.AnnotationEgressAllow: "allowed.test:" + strconv.Itoa(port) + ",rebind.test:" + strconv.Itoa(port)}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"}}
	if _, err := cs.CoreV1().Pods("sandbox").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pods := egress.NewPods(cs, "sandbox", nil)
	podsDone := make(chan struct{})
	go func() { defer close(podsDone); pods.Run(ctx) }()
	lo := netip.MustParseAddr("127.0.0.1")
	gw, err := egress.New(egress.Options{Sources: pods, Permit: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Resolver: probeResolver{"allowed.test": lo, "other.test": lo, "rebind.test": netip.MustParseAddr("10.0.0.9")},
		Drain:    time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, ln) }()
	defer func() { cancel(); <-served; <-podsDone }()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := pods.Source(lo); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the gateway did not see the pod")
		}
	}

	e := &env{opts: Options{EgressAllowed: allowed, EgressOther: other, EgressRebind: []string{rebind}, StandinToken: token}}
	cmd := exec.Command(py, "-")
	cmd.Stdin = strings.NewReader(e.egressParams("tool", "", "") + egressScript)
	cmd.Env = append(os.Environ(), "HTTPS_PROXY=http://"+ln.Addr().String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
	line, err := netsec.LastJSONLine(string(out), "probe", "egress")
	if err != nil {
		t.Fatalf("probe printed %q: %v", out, err)
	}
	t.Logf("tool probe: %s", line)
	// What verify's control pod sees of the same targets, directly.
	ctl := fmt.Sprintf(`{"allowed":{"ok":true,"token":true},"other":{"ok":true,"token":true},"lookup_allowed":{"addrs":["127.0.0.1"]},
"rebind":{%q:{"addrs":["10.0.0.9"]}},"direct_addr":"127.0.0.1:%d","direct":{"ok":true},"dns":{"answered":true}}`, rebind, port)
	allow, _ := egress.Parse(pod.Annotations[kube.AnnotationEgressAllow])
	got := statuses(judgeEgress(egressRun{allow: allow, allowed: allowed, other: other, rebind: []string{rebind},
		ctl: gjson.Parse(ctl), tool: gjson.Parse(line)}))
	for _, c := range egressChecks {
		want := Pass
		if c == "toolcalls/no-direct-egress" {
			want = Inconclusive // not probed: no policy on loopback to cut it
		}
		if got[c] != want {
			t.Errorf("%s: %s, want %s", c, got[c], want)
		}
	}
}
