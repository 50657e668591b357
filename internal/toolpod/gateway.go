package toolpod

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Defaults of the egress gateway as the manifests deploy it.
const (
	DefaultGatewayService = "sandbox-egress"
	DefaultGatewayPort    = 3128
)

// Gateway follows the egress gateway's Service and its endpoints, so that a
// call whose image reaches names through it is refused at once, with a
// reason, while no gateway pod is ready (rather than running a tool whose
// every request would fail), and so that its pod gets the Service's
// address: the pod resolves no name, not even the Service's.
type Gateway struct {
	service string
	port    int

	svc, slices cache.SharedIndexInformer
	mu          sync.Mutex
	synced      bool
}

// NewGateway watches the Service service (port: its proxy port) in ns; Run
// starts it.
func NewGateway(client kubernetes.Interface, ns, service string, port int) *Gateway {
	g := &Gateway{service: service, port: port}
	svc := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", service).String()
		}))
	eps := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = discoveryv1.LabelServiceName + "=" + service }))
	g.svc = svc.Core().V1().Services().Informer()
	g.slices = eps.Discovery().V1().EndpointSlices().Informer()
	return g
}

// Run watches until ctx ends.
func (g *Gateway) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range []cache.SharedIndexInformer{g.svc, g.slices} {
		wg.Add(1)
		go func() { defer wg.Done(); inf.Run(ctx.Done()) }()
	}
	if cache.WaitForCacheSync(ctx.Done(), g.svc.HasSynced, g.slices.HasSynced) {
		g.mu.Lock()
		g.synced = true
		g.mu.Unlock()
	}
	wg.Wait()
}

// Proxy is the gateway's URL (http://ClusterIP:port), or an error saying
// why no call can use it now.
func (g *Gateway) Proxy() (string, error) {
	g.mu.Lock()
	synced := g.synced
	g.mu.Unlock()
	if !synced {
		return "", fmt.Errorf("the egress gateway's Service %s is not known yet", g.service)
	}
	objs := g.svc.GetStore().List()
	if len(objs) == 0 {
		return "", fmt.Errorf("the egress gateway's Service %s is missing (deploy it: sandbox manifests)", g.service)
	}
	s := objs[0].(*corev1.Service)
	if net.ParseIP(s.Spec.ClusterIP) == nil {
		return "", fmt.Errorf("the egress gateway's Service %s has no cluster IP", g.service)
	}
	if !g.ready() {
		return "", fmt.Errorf("the egress gateway (Service %s) has no ready pod", g.service)
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(g.port))}
	return u.String(), nil
}

// ready reports whether an endpoint of the Service is ready.
func (g *Gateway) ready() bool {
	for _, o := range g.slices.GetStore().List() {
		for _, ep := range o.(*discoveryv1.EndpointSlice).Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				if len(ep.Addresses) > 0 {
					return true
				}
			}
		}
	}
	return false
}
