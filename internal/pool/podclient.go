package pool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
)

// DialFunc opens a connection to a sandbox pod's runner; tests swap it.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// dialTimeout bounds connecting to a runner on the pod network: a healthy
// pod answers in well under a millisecond, and a policy engine that drops
// instead of rejecting should not hold a request for long before the pool
// moves on to another pod.
const dialTimeout = 2 * time.Second

// podKeepAlive probes the connection to a pod's runner while its job runs. A run
// sends nothing until its answer, for up to a minute, so a peer that went
// silent (its node lost or cut off) would otherwise hold the request until
// its deadline. After 5 s idle, three unanswered probes 2 s apart end the
// connection: about 11 s, then verdict explains it. A live pod's kernel
// answers the probes however long the code runs.
var podKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}

// maxResultBytes bounds a runner's answer: its streams and output files at
// their worst.
const maxResultBytes = api.MaxResultBytes

// dialError marks a failure to connect: the job never reached the runner,
// so it is safe to try another pod.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect to runner: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// notDelivered says the job did not reach (or was refused by) the runner in
// pod, so the request can move on to another pod.
type notDelivered struct {
	pod string
	err error
}

func (e *notDelivered) Error() string { return fmt.Sprintf("sandbox pod %s: %v", e.pod, e.err) }
func (e *notDelivered) Unwrap() error { return e.err }

// newPodClient returns the pool's HTTP client of the pods' runners: no proxy
// (the pod network is direct), no connection reuse (each pod takes one
// request), and dial failures marked as such.
func newPodClient(dial DialFunc) *http.Client {
	if dial == nil {
		dial = dialPod
	}
	return &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, &dialError{err: err}
			}
			return c, nil
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}}
}

// dialPod connects to a pod's runner with the dial timeout and keepalive probes.
func dialPod(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: dialTimeout, KeepAliveConfig: podKeepAlive}
	return d.DialContext(ctx, network, addr)
}

func isDialError(err error) bool {
	var de *dialError
	return errors.As(err, &de)
}
