package policy

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandbox/internal/api"
)

// Watch keeps g on the policy in the ConfigMap of namespace ns until ctx
// ends, reading it again on each change. An edit that does not parse
// keeps the policy before it (an operator's typo must not lock every
// caller out, nor let anyone in) and is logged and counted; a
// ConfigMap deleted, or invalid from the start, leaves no policy, so
// every caller gets a 503 saying why.
func Watch(ctx context.Context, cs kubernetes.Interface, ns string, deployed api.CallPolicy, g *Gate, log *slog.Logger) {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", ConfigMap).String()
		}))
	inf := f.Core().V1().ConfigMaps().Informer()
	loaded := false
	apply := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		p, err := Parse([]byte(cm.Data[Key]), deployed)
		if err != nil {
			g.invalid.Inc()
			log.Error("caller policy not applied", "configmap", ns+"/"+ConfigMap, "resourceVersion", cm.ResourceVersion, "err", err)
			if !loaded {
				g.Clear(fmt.Sprintf("the caller policy (ConfigMap %s/%s) is not valid: an operator must fix it", ns, ConfigMap))
			}
			return
		}
		g.Set(p)
		loaded = true
		log.Info("caller policy applied", "configmap", ns+"/"+ConfigMap, "resourceVersion", cm.ResourceVersion, "callers", len(p.Callers))
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj any) { apply(obj) },
		DeleteFunc: func(any) {
			loaded = false
			g.Clear(fmt.Sprintf("there is no caller policy (ConfigMap %s/%s is gone)", ns, ConfigMap))
			log.Error("caller policy deleted: every caller is refused", "configmap", ns+"/"+ConfigMap)
		},
	})
	go inf.Run(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) && len(inf.GetStore().List()) == 0 {
		g.explain(fmt.Sprintf("there is no caller policy (ConfigMap %s/%s is missing)", ns, ConfigMap))
		log.Error("no caller policy: every caller is refused", "configmap", ns+"/"+ConfigMap)
	}
}
