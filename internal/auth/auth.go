// Package auth says who a caller of the API is: the Kubernetes
// ServiceAccount whose projected token it sends as a bearer token, checked
// with a TokenReview. It never logs a token or keeps one: its cache is keyed
// by the token's SHA-256.
package auth

import (
	"context"
	"net/http"
	"strings"

	"github.com/sandboxd/sandbox/internal/api"
)

// Identity is a caller as the API server named it.
type Identity struct {
	// User is the caller's user name: for a ServiceAccount,
	// system:serviceaccount:NAMESPACE:NAME.
	User string
	// Groups are its groups, among them system:serviceaccounts:NAMESPACE.
	Groups []string
}

// Anonymous is the identity of every caller when authentication is off.
var Anonymous = Identity{User: "anonymous"}

// saPrefix starts a ServiceAccount's user name.
const saPrefix = "system:serviceaccount:"

// Namespace is the namespace of a ServiceAccount caller, or "" for any
// other: what the metrics count callers by, a bounded set.
func (id Identity) Namespace() string {
	ns, _, ok := strings.Cut(strings.TrimPrefix(id.User, saPrefix), ":")
	if !ok || !strings.HasPrefix(id.User, saPrefix) {
		return ""
	}
	return ns
}

// Authenticator names the caller of a request, or returns an *api.Error: 401
// for a request without a valid token, 503 when the token cannot be checked
// now (never a pass).
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request) (Identity, error)
}

// None is authentication off: every caller is Anonymous.
type None struct{}

// Authenticate implements Authenticator.
func (None) Authenticate(context.Context, *http.Request) (Identity, error) { return Anonymous, nil }

// bearer is the token of r's Authorization header, or a 401 saying what is
// wrong with the header.
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", api.Errorf(http.StatusUnauthorized,
			"no token: send Authorization: Bearer <token>, a ServiceAccount token with the audience this service names")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", api.Errorf(http.StatusUnauthorized, "malformed Authorization header: want Bearer <token>")
	}
	return strings.TrimSpace(tok), nil
}
