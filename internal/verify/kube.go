package verify

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// Clients loads the kubeconfig (the user's, with the rights to create
// namespaces, exec into pods and review access) the way kubectl does.
func Clients(kubeconfig, kubeContext string) (*rest.Config, kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cfg, cs, nil
}

// execResult is what a command run with pods/exec printed.
type execResult struct {
	Stdout, Stderr string
	Elapsed        time.Duration
}

// podExec runs command in a pod's container with stdin, as kubectl exec
// does (WebSocket first, SPDY as the fallback).
func podExec(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, pod, container string, command []string, stdin string) (execResult, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container, Command: command,
			Stdin: stdin != "", Stdout: true, Stderr: true,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return execResult{}, fmt.Errorf("exec in %s/%s: %w", ns, pod, err)
	}
	sp, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return execResult{}, fmt.Errorf("exec in %s/%s: %w", ns, pod, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, sp, upgradeFailed)
	if err != nil {
		return execResult{}, fmt.Errorf("exec in %s/%s: %w", ns, pod, err)
	}
	var out, errOut bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}
	if stdin != "" {
		opts.Stdin = strings.NewReader(stdin)
	}
	start := time.Now()
	err = ex.StreamWithContext(ctx, opts)
	res := execResult{Stdout: out.String(), Stderr: errOut.String(), Elapsed: time.Since(start)}
	if err != nil {
		return res, fmt.Errorf("exec %s in %s/%s: %w (stderr: %s)", command[0], ns, pod, err, clip(res.Stderr, 300))
	}
	return res, nil
}

// serveReadyWait is how long verify waits for a Ready serve pod (a rollout
// in progress, a pool still filling).
const serveReadyWait = 2 * time.Minute

// forward is an open port-forward to one pod.
type forward struct {
	URL  string
	Pod  string
	stop context.CancelFunc
	done chan error
}

// Close stops the forward and waits for it.
func (f *forward) Close() {
	f.stop()
	<-f.done
}

// forwardService opens a port-forward, on a local port of its own, to a
// Ready pod behind Service svc, on the port the Service's port maps to. All
// requests then reach that one serve replica, so that its /metrics belong to
// the same process that ran the snippets.
func forwardService(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns, svcName string) (*forward, error) {
	svc, err := cs.CoreV1().Services(ns).Get(ctx, svcName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get service %s/%s: %w", ns, svcName, err)
	}
	if len(svc.Spec.Selector) == 0 || len(svc.Spec.Ports) == 0 {
		return nil, fmt.Errorf("service %s/%s has no selector or no ports", ns, svcName)
	}
	// A serve pod is Ready once its pool has a warm pod: wait for one.
	var pod *corev1.Pod
	var seen int
	_ = wait.PollUntilContextTimeout(ctx, time.Second, serveReadyWait, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String(),
		})
		if err != nil {
			return false, nil //nolint:nilerr // retry until the deadline
		}
		seen = len(pods.Items)
		for i := range pods.Items {
			if podReady(&pods.Items[i]) {
				pod = &pods.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if pod == nil {
		return nil, fmt.Errorf("service %s/%s: none of its %d pods became Ready within %s", ns, svcName, seen, serveReadyWait)
	}
	port, err := targetPort(svc.Spec.Ports[0].TargetPort, svc.Spec.Ports[0].Port, pod)
	if err != nil {
		return nil, err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod.Name).SubResource("portforward")
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward transport: %w", err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", req.URL())
	if tunnel, err := portforward.NewSPDYOverWebsocketDialer(req.URL(), cfg); err == nil {
		dialer = portforward.NewFallbackDialer(tunnel, dialer, upgradeFailed)
	}
	fctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddressesWithContext(fctx, dialer, []string{"127.0.0.1"},
		[]string{fmt.Sprintf("0:%d", port)}, ready, io.Discard, io.Discard)
	if err != nil {
		stop()
		return nil, fmt.Errorf("port-forward to %s: %w", pod.Name, err)
	}
	f := &forward{Pod: pod.Name, stop: stop, done: make(chan error, 1)}
	go func() { f.done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-f.done:
		stop()
		f.done <- err
		return nil, fmt.Errorf("port-forward to %s/%s:%d: %w", ns, pod.Name, port, err)
	case <-ctx.Done():
		f.Close()
		return nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		f.Close()
		return nil, fmt.Errorf("port-forward to %s: no local port: %v", pod.Name, err)
	}
	f.URL = fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local)
	return f, nil
}

func targetPort(tp intstr.IntOrString, port int32, pod *corev1.Pod) (int32, error) {
	switch {
	case tp.Type == intstr.Int && tp.IntVal != 0:
		return tp.IntVal, nil
	case tp.Type == intstr.String && tp.StrVal != "":
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == tp.StrVal {
					return p.ContainerPort, nil
				}
			}
		}
		return 0, fmt.Errorf("pod %s has no port named %q", pod.Name, tp.StrVal)
	}
	return port, nil
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// httpGet fetches a small document (health, metrics) from the service.
func httpGet(ctx context.Context, hc *http.Client, base, path string) (int, string, error) {
	u, err := url.JoinPath(base, path)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, string(body), err
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("...(%d bytes)", len(s))
}

// upgradeFailed reports whether a WebSocket stream could not be opened
// because the API server (or a proxy on the way) would not upgrade the
// connection, in which case exec and port-forward fall back to SPDY.
// client-go's WebSocket transport reports it with k8s.io/streaming's error
// type; apimachinery's older httpstream package has a type of its own that
// errors.As would never match.
func upgradeFailed(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}
