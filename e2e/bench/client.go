package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// localPort is where the client pod serves the local backend to itself.
const localPort = 18080

// clientScript is the load client, run with the sandbox image's python3 in
// the client pod. Every request is POST /v1/execute of print(1) on a new
// connection; each answer is one JSON line. "sent" and "done" are the wall
// clock: the kind node is a container on the bench's own host, so they
// compare with the bench's clock (the refill times use that). "timing" is
// the answer's Server-Timing parts and its duration_ms as "run".
//
//	floor N            time N bare `python3 -c 'print(1)'` runs, spawn to exit
//	load URL N C [CODE]  N requests, C at a time (all C leave at once); with
//	                   CODE, that snippet (right when it exits 0) instead of print(1)
//	fresh N CODE       time N `python3 -c CODE` runs in a temporary directory
//	imported N CODE    import the data stack, then time N runs of CODE in
//	                   this python3, each in fresh globals: imports already done
//	for URL SECONDS C  C workers, each sending one request after another
//	metrics URL...     print each URL's /metrics after a line "# URL"
const clientScript = `import concurrent.futures, contextlib, io, json, os, subprocess, sys, tempfile, threading, time, urllib.error, urllib.request
lock = threading.Lock()
def emit(r):
    with lock:
        print(json.dumps(r), flush=True)
def timing(h):
    parts = {}
    for entry in h.split(","):
        name, *params = [f.strip() for f in entry.split(";")]
        for p in params:
            if p.startswith("dur="):
                parts[name] = float(p[4:])
    return parts
def post(url, code=None):
    body = json.dumps({"code": code or "print(1)", "timeout_s": 30 if code else 10}).encode()
    with open(os.environ["SANDBOX_TOKEN_FILE"]) as f:
        auth = "Bearer " + f.read().strip()
    req = urllib.request.Request(url + "/v1/execute", data=body, headers={"Content-Type": "application/json", "Authorization": auth})
    out = {"sent": time.time()}
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=90) as r:
            b = json.loads(r.read())
            right = b.get("exit_code") == 0 and (code is not None or b.get("stdout") == "1\n")
            out.update(status=r.status, id=b.get("sandbox_id") or "", ok=right)
            if not right:
                out["error"] = (b.get("stderr") or "")[-200:]
            out["timing"] = timing(r.headers.get("Server-Timing") or "")
            if "duration_ms" in b:
                out["timing"]["run"] = b["duration_ms"]
    except urllib.error.HTTPError as e:
        raw = e.read()
        out.update(status=e.code, ok=False, error=raw[:200].decode("utf-8", "replace"))
    except Exception as e:
        out.update(status=0, ok=False, error="%s: %s" % (type(e).__name__, e))
    out["ms"] = (time.perf_counter() - t0) * 1000
    out["done"] = time.time()
    return out
mode = sys.argv[1]
if mode == "floor":
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter()
        p = subprocess.run(["python3", "-c", "print(1)"], stdout=subprocess.PIPE)
        ms = (time.perf_counter() - t0) * 1000
        emit({"ms": ms, "status": 200, "ok": p.returncode == 0 and p.stdout == b"1\n"})
elif mode == "fresh":
    os.chdir(tempfile.mkdtemp())
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter()
        p = subprocess.run(["python3", "-c", sys.argv[3]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ms = (time.perf_counter() - t0) * 1000
        emit({"ms": ms, "status": 200, "ok": p.returncode == 0, "error": p.stderr[-200:].decode("utf-8", "replace")})
elif mode == "imported":
    os.chdir(tempfile.mkdtemp())
    import numpy, pandas, matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot
    code = compile(sys.argv[3], "<snippet>", "exec")
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            exec(code, {"__name__": "__main__"})
        ms = (time.perf_counter() - t0) * 1000
        matplotlib.pyplot.close("all")
        emit({"ms": ms, "status": 200, "ok": True})
elif mode == "load":
    url, n, c = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    code = sys.argv[5] if len(sys.argv) > 5 else None
    first = min(c, n)
    start = threading.Barrier(first)
    def one(i):
        if i < first:
            start.wait()
        return post(url, code)
    with concurrent.futures.ThreadPoolExecutor(c) as ex:
        for r in ex.map(one, range(n)):
            emit(r)
elif mode == "for":
    url, secs, c = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    end = time.monotonic() + secs
    def worker():
        while time.monotonic() < end:
            emit(post(url))
    ts = [threading.Thread(target=worker) for _ in range(c)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
elif mode == "metrics":
    for url in sys.argv[2:]:
        print("# " + url)
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            print(r.read().decode())
`

// clientPod is the pod the load comes from: the sandbox image, so that its
// python3 is the floor's, with the local backend serving itself on
// 127.0.0.1 beside it.
func clientPod(ns, image string) *corev1.Pod {
	return kindenv.WithToken(bareClientPod(ns, image))
}

func bareClientPod(ns, image string) *corev1.Pod {
	uid := int64(65532)
	start := fmt.Sprintf("/usr/local/bin/sandbox serve --backend local --listen 127.0.0.1:%d >/tmp/local.log 2>&1 & exec python3 -c 'import time; time.sleep(10**7)'", localPort)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-client", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": "sandbox-bench"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"sh", "-c", start},
				Env:             []corev1.EnvVar{{Name: "HOME", Value: "/tmp"}, {Name: "TMPDIR", Value: "/tmp"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi"),
				}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// runClient runs the client script in the client pod with args and returns
// its samples, each labelled phase.
func (b *Bench) runClient(ctx context.Context, phase string, args ...string) ([]Sample, error) {
	out, err := b.kubectl(ctx, append([]string{"-n", b.ns, "exec", b.client, "-c", "main", "--", "python3", "-c", clientScript}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: client: %w", phase, err)
	}
	var samples []Sample
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var s Sample
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			return nil, fmt.Errorf("%s: client printed %q: %w", phase, line, err)
		}
		s.Phase = phase
		samples = append(samples, s)
	}
	return samples, sc.Err()
}

// load sends n requests c at a time to url from the client pod: print(1),
// or the snippet code when given.
func (b *Bench) load(ctx context.Context, phase, url string, n, c int, code ...string) ([]Sample, error) {
	s, err := b.runClient(ctx, phase, append([]string{"load", url, strconv.Itoa(n), strconv.Itoa(c)}, code...)...)
	if b.sandbox != nil {
		b.sandbox.used(s)
	}
	return s, err
}
