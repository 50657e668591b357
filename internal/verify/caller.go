package verify

import (
	"context"
	"fmt"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The callers verify plays against serve --auth kubernetes: ServiceAccounts
// of serve's namespace that the shipped caller policy names, whose tokens
// verify mints with its administrator's rights (serviceaccounts/token).
const (
	// DefaultCaller is granted everything: every check's calls, and the
	// positive control of each auth check.
	DefaultCaller = "sandbox-verify"
	// minTokenLife is the shortest life the API server grants a token.
	minTokenLife = 10 * time.Minute
)

// mintToken asks the API server for a token of ServiceAccount ns/sa for
// audience, living at least life. A ServiceAccount that does not exist is
// ("", nil): a deployment from before callers were named, which verify
// calls without a token.
func mintToken(ctx context.Context, cs kubernetes.Interface, ns, sa, audience string, life time.Duration) (string, error) {
	life = max(life, minTokenLife)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(life / time.Second))},
	}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("mint a token of %s/%s for audience %q: %w", ns, sa, audience, err)
	}
	return tr.Status.Token, nil
}
