package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/lru"

	"github.com/sandboxd/sandbox/internal/api"
)

// The TokenReview authenticator's bounds.
const (
	// DefaultAudience is the audience a caller's token must name.
	DefaultAudience = "sandbox"
	// passFor is how long a token the API server accepted is taken as it
	// is without asking again (never past the token's expiry): a revoked
	// ServiceAccount keeps its access this long at most.
	passFor = 30 * time.Second
	// refuseFor is how long a token the API server refused is refused
	// without asking again, so that one bad client in a loop costs one
	// review every refuseFor.
	refuseFor = 10 * time.Second
	// cacheSize bounds the answers kept: a flood of distinct tokens evicts
	// the oldest, it does not grow the cache.
	cacheSize = 4096
	// reviewsPerSecond and reviewBurst bound the TokenReviews serve sends:
	// a flood of distinct tokens gets 503s, and the API server does not get
	// the flood.
	reviewsPerSecond = 20
	reviewBurst      = 40
	// reviewTimeout bounds one TokenReview.
	reviewTimeout = 5 * time.Second
)

// answer is a cached review: the identity, or the 401 it ended in.
type answer struct {
	id      Identity
	refused error
	until   time.Time
}

// TokenReview authenticates bearer tokens with the API server's
// TokenReview, for Audience.
type TokenReview struct {
	client   kubernetes.Interface
	audience string
	cache    *lru.Cache
	limit    *rate.Limiter
	now      func() time.Time
}

// NewTokenReview returns an authenticator that asks cs about each new token
// for audience ("" means DefaultAudience).
func NewTokenReview(cs kubernetes.Interface, audience string) *TokenReview {
	if audience == "" {
		audience = DefaultAudience
	}
	return &TokenReview{
		client:   cs,
		audience: audience,
		cache:    lru.New(cacheSize),
		limit:    rate.NewLimiter(reviewsPerSecond, reviewBurst),
		now:      time.Now,
	}
}

// Audience is the audience tokens must name.
func (t *TokenReview) Audience() string { return t.audience }

// Authenticate implements Authenticator.
func (t *TokenReview) Authenticate(ctx context.Context, r *http.Request) (Identity, error) {
	tok, err := bearer(r)
	if err != nil {
		return Identity{}, err
	}
	key := sha256.Sum256([]byte(tok))
	now := t.now()
	if v, ok := t.cache.Get(key); ok {
		if a := v.(answer); now.Before(a.until) {
			return a.id, a.refused
		}
		t.cache.Remove(key)
	}
	c, err := t.precheck(tok, now)
	if err != nil {
		// Judged from the token alone: no review, nothing to cache.
		return Identity{}, err
	}
	if !t.limit.AllowN(now, 1) {
		return Identity{}, &api.Error{Status: http.StatusServiceUnavailable, RetryAfter: time.Second,
			Msg: "too many new tokens to check at once: try again in a second"}
	}
	a, err := t.review(ctx, tok)
	if err != nil {
		return Identity{}, err
	}
	a.until = now.Add(refuseFor)
	if a.refused == nil {
		a.until = now.Add(passFor)
		if c.Exp > 0 {
			a.until = minTime(a.until, time.Unix(c.Exp, 0))
		}
	}
	t.cache.Add(key, a)
	return a.id, a.refused
}

// review asks the API server about tok. An API server that cannot answer
// is a 503, never a pass.
func (t *TokenReview) review(ctx context.Context, tok string) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := t.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: tok, Audiences: []string{t.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return answer{}, &api.Error{Status: http.StatusServiceUnavailable, RetryAfter: 5 * time.Second,
			Msg: fmt.Sprintf("cannot check the token now (TokenReview: %v)", err)}
	}
	st := tr.Status
	switch {
	case !st.Authenticated:
		why := st.Error
		if why == "" {
			why = "the API server did not accept it"
		}
		return answer{refused: api.Errorf(http.StatusUnauthorized, "token not valid: %s", why)}, nil
	case !slices.Contains(st.Audiences, t.audience):
		return answer{refused: api.Errorf(http.StatusUnauthorized, "wrong audience: the token is not for %q", t.audience)}, nil
	}
	return answer{id: Identity{User: st.User.Username, Groups: st.User.Groups}}, nil
}

// claims are what precheck reads from a token before any review: hints
// for a clear 401 and the cache's bound, never a reason to pass.
type claims struct {
	Aud audiences `json:"aud"`
	Exp int64     `json:"exp"`
}

// audiences reads "aud", a string or a list of them.
type audiences []string

func (a *audiences) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = []string{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(a))
}

// precheck refuses a token that is not a JWT, is expired or names another
// audience, saying which, without asking the API server: the clear 401s
// are free, and only plausible tokens cost a review.
func (t *TokenReview) precheck(tok string, now time.Time) (claims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return claims{}, api.Errorf(http.StatusUnauthorized, "malformed token: not a JSON Web Token (a ServiceAccount token is one)")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c claims
	if err == nil {
		err = json.Unmarshal(payload, &c)
	}
	switch {
	case err != nil:
		return claims{}, api.Errorf(http.StatusUnauthorized, "malformed token: its claims do not decode")
	case c.Exp > 0 && !now.Before(time.Unix(c.Exp, 0)):
		return claims{}, api.Errorf(http.StatusUnauthorized, "expired token: it expired at %s",
			time.Unix(c.Exp, 0).UTC().Format(time.RFC3339))
	case !slices.Contains(c.Aud, t.audience):
		return claims{}, api.Errorf(http.StatusUnauthorized,
			"wrong audience: the token is for %q, this service takes %q", c.Aud, t.audience)
	}
	return c, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
