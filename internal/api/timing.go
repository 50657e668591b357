package api

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ServerTiming is the header in which serve and the runner say where an
// answer's time went (the W3C Server-Timing format: "name;dur=ms, ..."), so
// that any client, and make bench-kind, can split a request's latency into
// its parts without reading the servers' logs.
const ServerTiming = "Server-Timing"

// The parts of an execution that serve and the runner time.
const (
	TimingTotal     = "total"      // serve: the request, arrival to answer
	TimingClaim     = "claim"      // serve: getting a warm pod
	TimingRunner    = "runner"     // serve: POST to the runner until its answer is read
	TimingRunnerJob = "runner_job" // the runner: its handler, the job's decode to its answer
)

// The parts that say how the pod that ran an execution came to be warm,
// each timed by its runner from the runner's own start (the pod's creation
// is not visible from inside it). They are not part of the request's
// latency; serve passes them on so that a pod's create-to-Ready can be
// split without reading the pods' logs.
const (
	TimingPodPython = "pod_python" // runner start to its python3 waiting for the job
	TimingPodSealed = "pod_sealed" // runner start to the first proof that its egress is cut
	TimingPodReady  = "pod_ready"  // runner start to its first Ready answer to the kubelet
	TimingPodWarm   = "pod_warm"   // first Ready answer to the job's arrival: the time spent warm
)

// IsPodPart says whether a Server-Timing part is one of the TimingPod* parts.
func IsPodPart(name string) bool { return strings.HasPrefix(name, "pod_") }

// Timing collects the parts of one request. The zero value is ready; a nil
// *Timing takes nothing, so code on the request path times itself whether or
// not anyone asked.
type Timing struct {
	mu    sync.Mutex
	parts []timingPart
}

type timingPart struct {
	name string
	ms   float64
}

type timingKey struct{}

// WithTiming returns ctx carrying a new Timing, and that Timing.
func WithTiming(ctx context.Context) (context.Context, *Timing) {
	t := &Timing{}
	return context.WithValue(ctx, timingKey{}, t), t
}

// TimingOf returns the Timing ctx carries, or nil.
func TimingOf(ctx context.Context) *Timing {
	t, _ := ctx.Value(timingKey{}).(*Timing)
	return t
}

// Add records that part name took d. A part added twice (a request that
// tried a second pod) counts the sum.
func (t *Timing) Add(name string, d time.Duration) {
	t.addMS(name, float64(d.Microseconds())/1000)
}

func (t *Timing) addMS(name string, ms float64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.parts {
		if t.parts[i].name == name {
			t.parts[i].ms += ms
			return
		}
	}
	t.parts = append(t.parts, timingPart{name, ms})
}

// AddMS records that part name took ms milliseconds, as Add does.
func (t *Timing) AddMS(name string, ms float64) { t.addMS(name, ms) }

// Header is the Server-Timing value: the parts in the order first added.
func (t *Timing) Header() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := make([]string, len(t.parts))
	for i, p := range t.parts {
		s[i] = fmt.Sprintf("%s;dur=%.3f", p.name, p.ms)
	}
	return strings.Join(s, ", ")
}

// ParseServerTiming reads the parts of a Server-Timing value, in
// milliseconds. Entries without a duration, and parameters other than dur,
// are passed over.
func ParseServerTiming(h string) map[string]float64 {
	out := map[string]float64{}
	for entry := range strings.SplitSeq(h, ",") {
		fields := strings.Split(entry, ";")
		name := strings.TrimSpace(fields[0])
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(strings.TrimSpace(f), "dur="); ok && name != "" {
				if ms, err := strconv.ParseFloat(v, 64); err == nil {
					out[name] = ms
				}
			}
		}
	}
	return out
}
