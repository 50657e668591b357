package verify

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSealCopy: the copy carries the live pod's spec and runner flags, not
// its owner or node; a copy that becomes Ready where no policy applies is a
// FAIL, one that never runs proves nothing.
func TestSealCopy(t *testing.T) {
	defer func(w time.Duration) { sealCopyWindow = w }(sealCopyWindow)
	sealCopyWindow = 300 * time.Millisecond
	live := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-abcde", Namespace: "sandbox",
			Labels:          map[string]string{"app.kubernetes.io/name": "sandbox-runner", "sandbox.dev/kind": "snippet"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Pod", Name: "serve-0", UID: "u"}}},
		Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: "runner", Image: "sandbox:dev", Args: []string{"run", "--seal-probe", "10.96.0.1:443", "--weaken", "unproven-ready"}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	cs := fake.NewClientset(live)
	e := &env{opts: Options{Namespace: "sandbox"}, cs: cs, start: time.Now(), target: map[string]string{}}
	fx := &fixtures{Namespace: "sandbox-verify-x"}
	ctx := context.Background()

	sc := e.startSealCopy(ctx, fx.Namespace)
	if sc.err != nil || sc.from != live.Name {
		t.Fatalf("start: %+v", sc)
	}
	cp, err := cs.CoreV1().Pods(fx.Namespace).Get(ctx, sealCopyName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cp.Spec.NodeName != "" || len(cp.OwnerReferences) != 0 || cp.Labels["sandbox.dev/kind"] != "" ||
		len(cp.Spec.Containers[0].Args) != 5 || cp.Spec.Containers[0].Args[4] != "unproven-ready" {
		t.Errorf("copy %+v", cp)
	}
	if r := e.judgeSealCopy(ctx, fx, sc, true, "reached"); r.Status != Inconclusive {
		t.Errorf("a copy that never ran: %s %s", r.Status, r.Evidence)
	}
	cp.Status = live.Status
	if _, err := cs.CoreV1().Pods(fx.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := e.judgeSealCopy(ctx, fx, sc, true, "reached"); r.Status != Fail {
		t.Errorf("a copy Ready where no policy applies: %s %s", r.Status, r.Evidence)
	}
	// Without the control's reach the namespace may be sealed too: the
	// copy's readiness proves nothing either way.
	if r := e.judgeSealCopy(ctx, fx, sc, false, "not reached"); r.Status != Inconclusive {
		t.Errorf("control missed the API server: %s %s", r.Status, r.Evidence)
	}
	if r := e.judgeSealCopy(ctx, fx, &sealCopy{err: context.DeadlineExceeded}, true, ""); r.Status != Inconclusive {
		t.Errorf("no copy: %s", r.Status)
	}
}
