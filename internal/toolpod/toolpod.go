// Package toolpod is the Kubernetes side of tool calls (POST /v1/call): one
// pod per call, created on the request from the agent's own image, used
// once and deleted, whatever happens. There is no warm pool: the image
// differs from call to call.
package toolpod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/kube"
	"github.com/sandboxd/sandbox/internal/runnerclient"
)

// Defaults of a Caller.
const (
	// DefaultMaxConcurrent bounds the tool pods one serve replica keeps at
	// once: each holds 2 CPUs and 1 GiB, so an agent stuck in a loop must
	// not be able to fill the cluster.
	DefaultMaxConcurrent = 8
	// slotWait is how long a call waits for one of those slots before 503.
	slotWait = 30 * time.Second
	// verdictWait bounds the look at a pod whose runner's connection broke:
	// the kubelet reports a container's end a moment after it happens.
	verdictWait = 10 * time.Second
	// deleteTimeout bounds the delete after a call, off the request's
	// context so that a client that went away still gets its pod deleted.
	deleteTimeout = 20 * time.Second
	// janitorPeriod: how often stale tool pods (a delete that failed, a
	// serve that restarted) are looked for.
	janitorPeriod = time.Minute
	// maxAnswer bounds what the service reads of a runner's answer; the
	// runner keeps it within api.MaxCallAnswer, so more is a broken runner.
	maxAnswer = api.MaxCallAnswer + 1<<20
	// dialTimeout: a Ready pod's runner answers at once.
	dialTimeout = 5 * time.Second
)

// Options configure a Caller.
type Options struct {
	Client    kubernetes.Interface
	Namespace string
	// Pod is the template's variable part; Image is set per call.
	Pod kube.ToolPodOptions
	// Fence, with internet egress, keeps the nodes and the API server out
	// of the tool pods' internet; calls wait for it (nil: no fence).
	Fence *Fence
	// Images give each allowed image its egress; one they leave without
	// is given DefaultEgress (its zero value: egress.Internet, which
	// Pod.Internet may still narrow to cluster DNS only).
	Images        egress.Images
	DefaultEgress egress.Egress
	// Gateway is the egress gateway a call whose image has names needs
	// (nil: such a call is refused).
	Gateway *Gateway
	// ReadyTimeout bounds the wait for a pod to be Ready (0: kube.ToolReadyTimeout).
	ReadyTimeout time.Duration
	// MaxConcurrent bounds the calls in flight (0: DefaultMaxConcurrent).
	MaxConcurrent int
	Logger        *slog.Logger
	// HTTPClient talks to the runners; nil builds one with TCP keepalive.
	HTTPClient *http.Client
}

// Caller makes tool calls in one-use pods. It implements server.Caller.
type Caller struct {
	opts  Options
	log   *slog.Logger
	slots chan struct{}
	http  *http.Client
	m     *metrics

	mu     sync.Mutex
	active map[string]bool // pods of calls in flight, from before their create to their delete
	calls  sync.WaitGroup
}

// New checks the options and builds a Caller; Run starts its janitor.
func New(o Options) (*Caller, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("toolpod: no kubernetes client")
	case o.Namespace == "":
		return nil, errors.New("toolpod: no namespace")
	case o.Pod.SandboxImage == "":
		return nil, errors.New("toolpod: no sandbox image to copy the runner from")
	}
	if o.Pod.Owner.Name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "sandbox-serve"
		}
		o.Pod.Owner.Name = host
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = kube.ToolReadyTimeout
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.Pod.RunnerPort == 0 {
		o.Pod.RunnerPort = kube.DefaultRunnerPort
	}
	if o.Pod.MaxTimeout <= 0 {
		o.Pod.MaxTimeout = api.MaxCallTimeoutS * time.Second
	}
	if o.Pod.ActiveDeadline <= 0 {
		// Ready, the longest call, its slack, and a margin: past this the
		// pod cannot be doing anything the service still waits for.
		o.Pod.ActiveDeadline = o.ReadyTimeout + o.Pod.MaxTimeout + runnerclient.Slack + time.Minute
	}
	o.Pod.Namespace = o.Namespace
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c := &Caller{
		opts:   o,
		log:    o.Logger.With("component", "toolpod", "namespace", o.Namespace, "owner", o.Pod.Owner.Name),
		slots:  make(chan struct{}, o.MaxConcurrent),
		http:   o.HTTPClient,
		m:      newMetrics(),
		active: map[string]bool{},
	}
	if c.http == nil {
		c.http = newRunnerClient()
	}
	return c, nil
}

// RegisterMetrics implements server.MetricsRegisterer.
func (c *Caller) RegisterMetrics(r prometheus.Registerer) error { return c.m.register(r) }

// Ready reports whether calls can be taken; a Caller needs nothing warm.
func (c *Caller) Ready() bool { return true }

// Run deletes stale tool pods now and every janitorPeriod until ctx ends,
// then waits for the calls in flight (and their deletes) to finish.
func (c *Caller) Run(ctx context.Context) error {
	t := time.NewTicker(janitorPeriod)
	defer t.Stop()
	for {
		c.janitor(ctx)
		select {
		case <-ctx.Done():
			c.calls.Wait()
			return nil
		case <-t.C:
		}
	}
}

// newRunnerClient: no proxy, no connection reuse (each pod takes one
// request), keepalive probes so that a lost node ends the wait early.
func newRunnerClient() *http.Client {
	d := &net.Dialer{Timeout: dialTimeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}}
	return &http.Client{Transport: &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}}
}

// acquire takes a slot for a call, waiting up to slotWait.
func (c *Caller) acquire(ctx context.Context) error {
	t := time.NewTimer(slotWait)
	defer t.Stop()
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-t.C:
		return &api.Error{Status: http.StatusServiceUnavailable, RetryAfter: 5 * time.Second,
			Msg: fmt.Sprintf("too many tool calls in flight (%d on this replica), try again shortly", c.opts.MaxConcurrent)}
	case <-ctx.Done():
		return ctx.Err()
	}
}
