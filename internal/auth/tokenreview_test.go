package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandbox/internal/api"
)

// jwt is a token with the given claims and a signature nobody checks here:
// the fake API server below decides what it accepts.
func jwt(t *testing.T, aud any, exp time.Time, sig string) string {
	t.Helper()
	claims, err := json.Marshal(map[string]any{"aud": aud, "exp": exp.Unix(), "sub": "system:serviceaccount:agents:bot"})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(claims) + "." + sig
}

// apiServer is a fake API server that accepts tokens whose signature
// ends in "good" for the audiences asked, counts reviews, and fails them all
// while down is set.
type apiServer struct {
	reviews atomic.Int64
	down    atomic.Bool
	seen    []string
}

func (s *apiServer) authenticator() *TokenReview {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.reviews.Add(1)
		if s.down.Load() {
			return true, nil, errors.New("connection refused")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		s.seen = append(s.seen, tr.Spec.Token)
		out := tr.DeepCopy()
		if strings.HasSuffix(tr.Spec.Token, "good") {
			out.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
				User: authnv1.UserInfo{Username: "system:serviceaccount:agents:bot",
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:agents"}}}
		} else {
			out.Status = authnv1.TokenReviewStatus{Error: "invalid signature"}
		}
		return true, out, nil
	})
	return NewTokenReview(cs, "")
}

func request(token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/execute", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

// TestTokenReviewRefusals: each bad token gets a 401 saying which kind it
// is, and the ones the token itself shows cost no review.
func TestTokenReviewRefusals(t *testing.T) {
	var s apiServer
	a := s.authenticator()
	soon := time.Now().Add(time.Hour)
	for _, c := range []struct {
		name, header, want string
		reviews            int64
	}{
		{"none", "", "no token", 0},
		{"not bearer", "Basic dXNlcjpwYXNz", "malformed Authorization header", 0},
		{"not a JWT", "Bearer abc", "malformed token", 0},
		{"claims not JSON", "Bearer a.%%%.c", "malformed token", 0},
		{"expired", "Bearer " + jwt(t, "sandbox", time.Now().Add(-time.Minute), "good"), "expired token", 0},
		{"wrong audience", "Bearer " + jwt(t, []string{"https://kubernetes.default.svc"}, soon, "good"), "wrong audience", 0},
		{"bad signature", "Bearer " + jwt(t, "sandbox", soon, "forged"), "token not valid: invalid signature", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := s.reviews.Load()
			r := httptest.NewRequest(http.MethodPost, "/v1/execute", nil)
			if c.header != "" {
				r.Header.Set("Authorization", c.header)
			}
			_, err := a.Authenticate(context.Background(), r)
			ae, ok := api.AsError(err)
			if !ok || ae.Status != http.StatusUnauthorized || !strings.Contains(ae.Msg, c.want) {
				t.Fatalf("got %v, want a 401 saying %q", err, c.want)
			}
			if n := s.reviews.Load() - before; n != c.reviews {
				t.Errorf("%d reviews, want %d", n, c.reviews)
			}
		})
	}
}

// TestTokenReviewCaches: a good token is reviewed once, then served from
// the cache, never beyond its expiry; a refused one is not reviewed again
// at once either.
func TestTokenReviewCaches(t *testing.T) {
	var s apiServer
	a := s.authenticator()
	now := time.Now()
	a.now = func() time.Time { return now }
	tok := jwt(t, "sandbox", now.Add(10*time.Second), "good")
	for range 3 {
		id, err := a.Authenticate(context.Background(), request(tok))
		if err != nil || id.User != "system:serviceaccount:agents:bot" || id.Namespace() != "agents" {
			t.Fatalf("got %+v, %v", id, err)
		}
	}
	if n := s.reviews.Load(); n != 1 {
		t.Errorf("%d reviews for one token asked three times, want 1", n)
	}
	// The token expires before passFor is over: its cached pass must not
	// outlive it.
	now = now.Add(11 * time.Second)
	if _, err := a.Authenticate(context.Background(), request(tok)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("after its expiry: %v, want expired", err)
	}
	forged := jwt(t, "sandbox", now.Add(time.Hour), "forged")
	for range 3 {
		if _, err := a.Authenticate(context.Background(), request(forged)); err == nil {
			t.Fatal("a forged token passed")
		}
	}
	if n := s.reviews.Load(); n != 2 {
		t.Errorf("%d reviews in all, want 2 (the forged token's once)", n)
	}
}

// TestTokenReviewFailsClosed: an API server that cannot answer is a 503,
// never a pass, and is asked again next time.
func TestTokenReviewFailsClosed(t *testing.T) {
	var s apiServer
	a := s.authenticator()
	s.down.Store(true)
	tok := jwt(t, "sandbox", time.Now().Add(time.Hour), "good")
	_, err := a.Authenticate(context.Background(), request(tok))
	if ae, ok := api.AsError(err); !ok || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("API server down: %v, want a 503", err)
	}
	s.down.Store(false)
	if _, err := a.Authenticate(context.Background(), request(tok)); err != nil {
		t.Fatalf("API server back: %v", err)
	}
}

// TestTokenReviewFloodBounded: many distinct bad tokens neither grow the
// cache past its bound nor send the API server more than the burst of
// reviews at once; the rest get a 503 until the rate allows more.
func TestTokenReviewFloodBounded(t *testing.T) {
	var s apiServer
	a := s.authenticator()
	// The clock stands still: the limiter refills nothing during the flood,
	// however long it takes here.
	now := time.Now()
	a.now = func() time.Time { return now }
	soon := now.Add(time.Hour)
	unavailable := 0
	for i := range cacheSize + 500 {
		_, err := a.Authenticate(context.Background(), request(jwt(t, "sandbox", soon, fmt.Sprint("forged", i))))
		if ae, ok := api.AsError(err); ok && ae.Status == http.StatusServiceUnavailable {
			unavailable++
		}
	}
	if n := s.reviews.Load(); n != reviewBurst {
		t.Errorf("%d reviews for a flood of forged tokens in an instant, want the burst (%d)", n, reviewBurst)
	}
	// A second later the rate allows more again.
	now = now.Add(time.Second)
	if _, err := a.Authenticate(context.Background(), request(jwt(t, "sandbox", soon, "forged-after"))); status(err) != http.StatusUnauthorized {
		t.Errorf("a second after the flood: %v, want the review's 401", err)
	}
	if unavailable == 0 {
		t.Error("no 503 in a flood past the review rate")
	}
	if a.cache.Len() > cacheSize {
		t.Errorf("cache of %d entries, bound %d", a.cache.Len(), cacheSize)
	}
}

func status(err error) int {
	if ae, ok := api.AsError(err); ok {
		return ae.Status
	}
	return 0
}

// BenchmarkAuthenticateCached is what a caller pays on every request once
// its token is known: the hash and the cache, no review.
func BenchmarkAuthenticateCached(b *testing.B) {
	var s apiServer
	a := s.authenticator()
	claims, _ := json.Marshal(map[string]any{"aud": "sandbox", "exp": time.Now().Add(time.Hour).Unix()})
	enc := base64.RawURLEncoding.EncodeToString
	// A projected token is about a kilobyte.
	tok := enc([]byte(`{"alg":"RS256"}`)) + "." + enc(claims) + "." + strings.Repeat("s", 900) + "good"
	r := request(tok)
	if _, err := a.Authenticate(context.Background(), r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Authenticate(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
	if s.reviews.Load() != 1 {
		b.Fatalf("%d reviews, want 1", s.reviews.Load())
	}
}
