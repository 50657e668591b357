package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandbox/internal/kube"
)

// Source is the tool pod a connection comes from: who it is, what it may
// reach, and its bounds. One Source per pod UID: a pod made later on the
// same address is another Source, with its own list and counters.
type Source struct {
	Pod       string
	UID       types.UID
	Image     string
	RequestID string
	Allow     Egress

	conns    atomic.Int64
	bytesOut atomic.Int64
	// gone is closed when the pod stops being a live tool pod: its
	// connections are closed then, whatever they were doing.
	gone chan struct{}
}

// Gone is closed once the pod is no longer a live tool pod.
func (s *Source) Gone() <-chan struct{} { return s.gone }

// Sources attributes a connection to a tool pod by its source address.
type Sources interface {
	Source(ip netip.Addr) (*Source, error)
}

// errUnattributed: no live tool pod with an allow list has the address.
var errUnattributed = errors.New("no live tool pod with an egress allow list has this address")

// Pods are the live gateway tool pods of a namespace, from an informer:
// Running, not terminating, with an address, and an allow list serve wrote
// (kube.AnnotationEgressAllow). The watch delivers a pod's deletion before
// another pod's status can show the address it freed, so an address is
// never attributed to a pod the gateway knows to be gone; an address two
// live pods claim (an event still in flight) is attributed to neither.
type Pods struct {
	inf cache.SharedIndexInformer

	mu    sync.Mutex
	byUID map[types.UID]*Source
	byIP  map[netip.Addr]map[types.UID]*Source
	count func(int)
}

// NewPods watches the gateway tool pods of ns; Run starts it. count, if
// set, is told how many pods are attributable after each change.
func NewPods(client kubernetes.Interface, ns string, count func(int)) *Pods {
	sel := labels.SelectorFromSet(labels.Set{kube.LabelName: kube.RunnerName, kube.LabelKind: kube.KindTool, kube.LabelEgress: kube.EgressGateway})
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = sel.String() }))
	p := &Pods{inf: f.Core().V1().Pods().Informer(), byUID: map[types.UID]*Source{}, byIP: map[netip.Addr]map[types.UID]*Source{}, count: count}
	_, _ = p.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { p.update(o) },
		UpdateFunc: func(_, o any) { p.update(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if pod, ok := o.(*corev1.Pod); ok {
				p.remove(pod.UID)
			}
		},
	})
	return p
}

// Run watches until ctx ends.
func (p *Pods) Run(ctx context.Context) { p.inf.Run(ctx.Done()) }

// Synced reports whether the first list has been seen: until then every
// connection is refused.
func (p *Pods) Synced() bool { return p.inf.HasSynced() }

// Source implements Sources.
func (p *Pods) Source(ip netip.Addr) (*Source, error) {
	if !p.Synced() {
		return nil, errors.New("the gateway has not listed the tool pods yet")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	claims := p.byIP[ip.Unmap()]
	switch len(claims) {
	case 0:
		return nil, errUnattributed
	case 1:
		for _, s := range claims {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%d live tool pods claim this address (a change not yet seen): refused until one goes", len(claims))
}

// live is the pod's Source, or nil when it may not use the gateway.
func live(pod *corev1.Pod) *Source {
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil || len(pod.Status.PodIPs) == 0 && pod.Status.PodIP == "" {
		return nil
	}
	allow, err := Parse(pod.Annotations[kube.AnnotationEgressAllow])
	if err != nil || allow.Mode != Names {
		// Only serve writes the list, and only names: anything else is no
		// list at all.
		return nil
	}
	image := ""
	for _, c := range pod.Spec.Containers {
		if c.Name == kube.RunnerContainer {
			image = c.Image
		}
	}
	return &Source{Pod: pod.Name, UID: pod.UID, Image: image, RequestID: pod.Annotations[kube.AnnotationRequestID], Allow: allow, gone: make(chan struct{})}
}

func podAddrs(pod *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	ips := pod.Status.PodIPs
	if len(ips) == 0 {
		ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func (p *Pods) update(o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	s := live(pod)
	if s == nil {
		p.remove(pod.UID)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byUID[pod.UID]; ok {
		// A pod's list, image and address never change once it runs: the
		// Source it has is the one it keeps (its counters with it).
		return
	}
	p.byUID[pod.UID] = s
	for _, a := range podAddrs(pod) {
		if p.byIP[a] == nil {
			p.byIP[a] = map[types.UID]*Source{}
		}
		p.byIP[a][pod.UID] = s
	}
	p.counted()
}

func (p *Pods) remove(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.byUID[uid]
	if !ok {
		return
	}
	delete(p.byUID, uid)
	for a, claims := range p.byIP {
		delete(claims, uid)
		if len(claims) == 0 {
			delete(p.byIP, a)
		}
	}
	close(s.gone)
	p.counted()
}

func (p *Pods) counted() {
	if p.count != nil {
		p.count(len(p.byUID))
	}
}
