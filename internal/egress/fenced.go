package egress

import (
	"context"
	"net/netip"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandbox/internal/kube"
)

// Fenced reads the addresses serve's fence keeps out of the tool pods'
// internet policy (its annotation kube.FencedAnnotation: every public
// address of every node and API server endpoint, and serve's
// --tool-egress-deny) so that the gateway never dials them either, without
// reading Nodes itself: one policy, read by name, is all it needs.
type Fenced struct {
	inf cache.SharedIndexInformer
}

// NewFenced watches the policy named policy in ns; Run starts it.
func NewFenced(client kubernetes.Interface, ns, policy string) *Fenced {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", policy).String()
		}))
	return &Fenced{inf: f.Networking().V1().NetworkPolicies().Informer()}
}

// Run watches until ctx ends.
func (f *Fenced) Run(ctx context.Context) { f.inf.Run(ctx.Done()) }

// Synced reports whether the policy has been listed (found or not).
func (f *Fenced) Synced() bool { return f.inf.HasSynced() }

// Prefixes are the fenced addresses as last seen.
func (f *Fenced) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, o := range f.inf.GetStore().List() {
		np, ok := o.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		v := np.Annotations[kube.FencedAnnotation]
		if v == "" {
			continue
		}
		ps, err := kube.ParsePrefixes(strings.Split(v, ","))
		if err == nil {
			out = append(out, ps...)
		}
	}
	return out
}
