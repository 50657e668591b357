package toolpod

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandbox/internal/kube"
)

// InternetPolicy is the manifests' NetworkPolicy that gives tool pods the
// internet; the Fence keeps its excepts.
const InternetPolicy = "sandbox-tool-internet"

// fenceResync is how often the Fence checks the policy even when nothing
// changed, and retries a write that failed.
const fenceResync = 30 * time.Second

// maxSealAddrs bounds the node and API server addresses a tool pod's runner
// proves cut before it is Ready (the policy fences them all).
const maxSealAddrs = 8

// FenceOptions configure a Fence.
type FenceOptions struct {
	Client    kubernetes.Interface
	Namespace string
	// Extra are addresses no API object lists that tool pods must never
	// reach (serve's --tool-egress-deny): a node's public address on an
	// interface its Node does not name, a load balancer in front of the API
	// server.
	Extra  []netip.Prefix
	Logger *slog.Logger
	// Off fences nothing, and removes what it fenced before (the
	// weakening weaken.Unfenced).
	Off bool
}

// Fence keeps the tool pods' internet policy excepting every address of
// every node and of every API server endpoint, as nodes come and go: the
// policy's "everything but the private ranges" would otherwise let tool
// code reach a node's public address (its kubelet, or the API server on
// it). A call is refused while the live policy leaves one open.
type Fence struct {
	o   FenceOptions
	log *slog.Logger

	nodes, slices, policies cache.SharedIndexInformer
	kick                    chan struct{}

	mu     sync.Mutex
	synced bool
}

// NewFence builds a Fence; Run starts it.
func NewFence(o FenceOptions) *Fence {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	f := &Fence{o: o, log: log, kick: make(chan struct{}, 1)}
	all := informers.NewSharedInformerFactory(o.Client, 0)
	apiServer := informers.NewSharedInformerFactoryWithOptions(o.Client, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes" }))
	policy := informers.NewSharedInformerFactoryWithOptions(o.Client, 0, informers.WithNamespace(o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", InternetPolicy).String()
		}))
	f.nodes = all.Core().V1().Nodes().Informer()
	f.slices = apiServer.Discovery().V1().EndpointSlices().Informer()
	f.policies = policy.Networking().V1().NetworkPolicies().Informer()
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f.poke() },
		UpdateFunc: func(any, any) { f.poke() },
		DeleteFunc: func(any) { f.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{f.nodes, f.slices, f.policies} {
		_, _ = inf.AddEventHandler(h)
	}
	return f
}

func (f *Fence) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Run watches and writes until ctx ends.
func (f *Fence) Run(ctx context.Context) {
	for _, inf := range []cache.SharedIndexInformer{f.nodes, f.slices, f.policies} {
		go inf.Run(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), f.nodes.HasSynced, f.slices.HasSynced, f.policies.HasSynced) {
		return
	}
	f.mu.Lock()
	f.synced = true
	f.mu.Unlock()
	t := time.NewTicker(fenceResync)
	defer t.Stop()
	for {
		if err := f.reconcile(ctx); err != nil && ctx.Err() == nil {
			f.log.Error("tool egress fence: cannot update the policy", "policy", InternetPolicy, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
		case <-t.C:
		}
	}
}

// want is every prefix to fence, from the caches: each node's and API
// server endpoint's address that is public (kube.Public: a private one is
// the policy's own except, whose loss the pods' seal catches, since the
// API server's Service leads to one), and the extra prefixes; seal is some of them
// to prove cut from a tool pod, on a port that listens where the path is
// open (the kubelet's, the API server's; an extra prefix's first address on
// the kubelet's).
func (f *Fence) want() (want []netip.Prefix, seal []string) {
	if f.o.Off {
		return nil, nil
	}
	seen := map[netip.Prefix]bool{}
	add := func(p netip.Prefix, port int) {
		if !seen[p] && (!p.IsSingleIP() || kube.Public(p.Addr()) || slices.Contains(f.o.Extra, p)) {
			seen[p] = true
			want = append(want, p)
			if port > 0 && len(seal) < maxSealAddrs {
				seal = append(seal, netip.AddrPortFrom(p.Addr(), uint16(port)).String())
			}
		}
	}
	// API server endpoints first: on clusters whose control plane is not
	// a node, they are the likeliest public address.
	for _, o := range f.slices.GetStore().List() {
		as, port := kube.EndpointAddrs(o.(*discoveryv1.EndpointSlice))
		for _, a := range as {
			add(kube.Host(a), port)
		}
	}
	nodes := f.nodes.GetStore().List()
	slices.SortFunc(nodes, func(a, b any) int { return strings.Compare(a.(*corev1.Node).Name, b.(*corev1.Node).Name) })
	for _, o := range nodes {
		n := o.(*corev1.Node)
		port := int(n.Status.DaemonEndpoints.KubeletEndpoint.Port)
		if port == 0 {
			port = kube.KubeletPort
		}
		for _, a := range kube.NodeAddrs(n) {
			add(kube.Host(a), port)
		}
	}
	for _, p := range f.o.Extra {
		add(p.Masked(), kube.KubeletPort)
	}
	return want, seal
}

// reconcile writes the policy when it leaves an address open, or keeps an
// except whose address went.
func (f *Fence) reconcile(ctx context.Context) error {
	want, _ := f.want()
	nps := f.o.Client.NetworkingV1().NetworkPolicies(f.o.Namespace)
	p, err := nps.Get(ctx, InternetPolicy, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !kube.Fence(p, want) {
		return nil
	}
	if _, err := nps.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		return err
	}
	f.log.Info("tool egress fence: policy updated", "policy", InternetPolicy, "fenced", p.Annotations[kube.FencedAnnotation])
	return nil
}

// Check is nil when the live policy (as last seen) leaves none of the
// addresses open; a call is refused otherwise, since its pod could reach
// them.
func (f *Fence) Check() error {
	f.mu.Lock()
	synced := f.synced
	f.mu.Unlock()
	if !synced {
		return fmt.Errorf("the nodes, API server endpoints and policy %s are not known yet", InternetPolicy)
	}
	objs := f.policies.GetStore().List()
	if len(objs) == 0 {
		return fmt.Errorf("policy %s is missing", InternetPolicy)
	}
	want, _ := f.want()
	if open := kube.Exposed(objs[0].(*networkingv1.NetworkPolicy), want); len(open) > 0 {
		f.poke()
		return fmt.Errorf("policy %s does not yet except %v", InternetPolicy, open)
	}
	return nil
}

// SealProbes are node and API server addresses (host:port, at most
// maxSealAddrs) a tool pod's runner proves cut before it is Ready.
func (f *Fence) SealProbes() []string {
	_, seal := f.want()
	return seal
}
