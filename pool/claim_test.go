package pool

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/sandboxd/sandbox/api"
)

// hangingPatches is a clientset whose pod patches never answer, as an API
// server that stopped responding; everything else goes to the fake.
type hangingPatches struct{ kubernetes.Interface }

// IsWatchListSemanticsUnSupported passes on the fake's answer: the informer
// must not wait for a watch-list stream the fake does not send.
func (h hangingPatches) IsWatchListSemanticsUnSupported() bool {
	f, ok := h.Interface.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && f.IsWatchListSemanticsUnSupported()
}

func (h hangingPatches) CoreV1() corev1client.CoreV1Interface {
	return hangingCore{h.Interface.CoreV1()}
}

type hangingCore struct{ corev1client.CoreV1Interface }

func (c hangingCore) Pods(ns string) corev1client.PodInterface {
	return hangingPods{c.CoreV1Interface.Pods(ns)}
}

type hangingPods struct{ corev1client.PodInterface }

func (hangingPods) Patch(ctx context.Context, _ string, _ types.PatchType, _ []byte, _ metav1.PatchOptions, _ ...string) (*corev1.Pod, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestClaimEndsWhenTheAPIServerHangs(t *testing.T) {
	const wait = 300 * time.Millisecond
	e := newEnv(t, nil, func(o *Options) {
		o.Wait = wait
		o.Client = hangingPatches{o.Client}
	}).start()
	e.waitWarm(3)
	answered := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := e.execute("x")
		answered <- err
	}()
	select {
	case err := <-answered:
		var ae *api.Error
		if !errors.As(err, &ae) || ae != api.ErrNoCapacity {
			t.Fatalf("err = %v, want api.ErrNoCapacity", err)
		}
		t.Logf("503 after %s with a %s pool wait", time.Since(start).Round(time.Millisecond), wait)
	case <-time.After(10 * wait):
		t.Fatalf("no answer %s into a claim whose patch hangs (pool wait %s)", 10*wait, wait)
	}
}
