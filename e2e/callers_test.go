//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/policy"
	"github.com/sandboxd/sandbox/wire"
)

// The two teams of TestCallers and what the policy grants them.
const (
	teamA = "sandbox-e2e-team-a" // snippets and the agent image, 2 in flight, 30 a minute
	teamB = "sandbox-e2e-team-b" // snippets only
	// floodConcurrency is how many requests team A keeps going at once.
	floodConcurrency = 20
	// teamAInFlight bounds what team A holds, and teamARate what it drains
	// from the pool: below the pool's refill on this 2-CPU node (about a
	// pod a second), so that pods are left for team B. With the rate at
	// 6,000 a minute, team B's requests waited 20 s for a pod (p50) while
	// team A's two slots took every pod as it came (2026-12-06).
	teamAInFlight = 2
	teamARate     = 30
)

// teams is the callers' state: tokens by name, the policy to restore.
type teams struct {
	cs       kubernetes.Interface
	base     string
	original string
	tokens   map[string]string
}

// TestCallers: serve knows who calls (a ServiceAccount token, checked with
// a TokenReview) and does only what the caller policy grants each caller,
// at its quota; the policy is read again while serving, and a revoked
// ServiceAccount is refused within the cache's bound.
func TestCallers(t *testing.T) {
	f := features.New("callers are named, granted and bounded").
		WithLabel("needs", "service").
		Setup(withTeams).
		Teardown(restoreTeams).
		Assess("no token, a wrong one, a stranger: 401s and a 403", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			tm := teamsOf(ctx)
			wrong := tm.mint(ctx, t, teamA, "default", "not-sandbox")
			for _, c := range []struct {
				name, token string
				status      int
				want        string
			}{
				{"no token", "", 401, "no token"},
				{"not a token", "abc", 401, "malformed token"},
				{"another audience", wrong, 401, "wrong audience"},
				{"a caller the policy names nowhere", tm.mint(ctx, t, kindenv.Namespace, "default", auth.DefaultAudience), 403,
					"system:serviceaccount:" + kindenv.Namespace + ":default"},
			} {
				_, err := tm.run(ctx, c.token, "print(1)", 10)
				var ce *client.Error
				if !errors.As(err, &ce) || ce.StatusCode != c.status || !strings.Contains(ce.Message, c.want) {
					t.Errorf("%s: %v, want %d saying %q", c.name, err, c.status, c.want)
				}
			}
			// The positive control: the same service runs a granted caller's.
			if _, err := tm.run(ctx, tm.tokens[teamB], "print(1)", 10); err != nil {
				t.Fatalf("team B's snippet: %v", err)
			}
			return ctx
		}).
		Assess("each team does what it is granted", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			tm := teamsOf(ctx)
			call := wire.CallRequest{Image: kindenv.AgentImage, Function: "tools.sample:add", Args: []byte(`[2, 3]`)}
			if _, err := tm.call(ctx, tm.tokens[teamB], call); !isStatus(err, 403, "may not call tools") {
				t.Errorf("team B calls a tool: %v, want 403", err)
			}
			res, err := tm.call(ctx, tm.tokens[teamA], call)
			var v struct {
				Sum int `json:"sum"`
			}
			if err != nil || json.Unmarshal(res.Result, &v) != nil || v.Sum != 5 {
				t.Errorf("team A calls its image: %s, %v", res.Result, err)
			}
			if _, err := tm.run(ctx, tm.tokens[teamB], "print(1)", 45); !isStatus(err, 400, "timeout_s of 30 at most") {
				t.Errorf("team B over its timeout: %v, want 400", err)
			}
			return ctx
		}).
		Assess("one team's flood leaves the other its requests", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			tm := teamsOf(ctx)
			flood, beside := tm.flood(ctx, t)
			t.Logf("team A at concurrency %d: %s", floodConcurrency, flood)
			t.Logf("team B beside it, one at a time: %s", beside)
			if flood.throttled == 0 {
				t.Errorf("team A's flood was never throttled past %d in flight", teamAInFlight)
			}
			if beside.ok < 3 || beside.throttled > 0 || beside.other > 0 {
				t.Errorf("team B beside the flood: %s, want every request run (a starved one is a 503), at least 3", beside)
			}
			// The flood's last runs end on their pods after their callers
			// hung up: team A is admitted again once they have.
			tm.waitAdmitted(ctx, t, teamA)
			return ctx
		}).
		Assess("the policy is edited while serving", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			tm := teamsOf(ctx)
			start := time.Now()
			tm.setPolicy(ctx, t, teamA) // team B's entry is gone
			var err error
			for time.Since(start) < time.Minute {
				if _, err = tm.run(ctx, tm.tokens[teamB], "print(1)", 10); isStatus(err, 403, teamB) {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			if !isStatus(err, 403, teamB) {
				t.Fatalf("team B after its grant was removed: %v, want 403", err)
			}
			t.Logf("the edit applied within %s", time.Since(start).Round(100*time.Millisecond))
			tm.waitAdmitted(ctx, t, teamA) // still granted
			return ctx
		}).
		Assess("a revoked ServiceAccount finishes its run, then is refused", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			tm := teamsOf(ctx)
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "short-lived", Namespace: teamA}}
			if _, err := tm.cs.CoreV1().ServiceAccounts(teamA).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			tok := tm.mint(ctx, t, teamA, sa.Name, auth.DefaultAudience)
			// Team A's bucket refills (3 at 30 a minute) after the steps before.
			time.Sleep(6 * time.Second)
			done := make(chan error, 1)
			go func() {
				// A 429 or 503 means the run was not admitted yet (a busy CI
				// node still finishing the flood's pods): try again. An
				// attempt after the deletion is still admitted from the cache.
				for {
					res, err := tm.run(ctx, tok, "import time; time.sleep(4); print('done')", 20)
					if err == nil && res.Stdout != "done\n" {
						err = fmt.Errorf("stdout %q", res.Stdout)
					}
					if (isStatus(err, 429, "") || isStatus(err, 503, "")) && ctx.Err() == nil {
						t.Logf("the run under way, not admitted yet: %v", err)
						time.Sleep(time.Second)
						continue
					}
					done <- err
					return
				}
			}()
			time.Sleep(2 * time.Second)
			if err := tm.cs.CoreV1().ServiceAccounts(teamA).Delete(ctx, sa.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			deleted := time.Now()
			if err := <-done; err != nil {
				t.Errorf("the run under way when its ServiceAccount went: %v", err)
			}
			var err error
			for time.Since(deleted) < 2*time.Minute {
				if _, err = tm.run(ctx, tok, "print(1)", 10); isStatus(err, 401, "") {
					break
				}
				time.Sleep(time.Second)
			}
			if !isStatus(err, 401, "") {
				t.Fatalf("the revoked token: %v, want 401", err)
			}
			t.Logf("the revoked token was refused %s after its ServiceAccount was deleted", time.Since(deleted).Round(time.Second))
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

type teamsKey struct{}

func teamsOf(ctx context.Context) *teams { return ctx.Value(teamsKey{}).(*teams) }

func withTeams(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
	if err := ServiceErr(ctx); err != nil {
		t.Fatal(err)
	}
	tm := &teams{cs: clientset(ctx, t), base: forwardToService(ctx, t, cfg), tokens: map[string]string{}}
	cm, err := tm.cs.CoreV1().ConfigMaps(kindenv.Namespace).Get(ctx, policy.ConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tm.original = cm.Data[policy.Key]
	for _, ns := range []string{teamA, teamB} {
		_, err := tm.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: kindenv.ClientLabels()}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	ctx = context.WithValue(ctx, teamsKey{}, tm)
	tm.setPolicy(ctx, t, teamA, teamB)
	for _, ns := range []string{teamA, teamB} {
		tm.tokens[ns] = tm.mint(ctx, t, ns, "default", auth.DefaultAudience)
	}
	// Until team B is admitted, the edit has not reached serve.
	tm.waitAdmitted(ctx, t, teamB)
	return ctx
}

// waitAdmitted waits, a minute at most, until team's snippet runs.
func (tm *teams) waitAdmitted(ctx context.Context, t *testing.T, team string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := tm.run(ctx, tm.tokens[team], "print(1)", 10)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not admitted within a minute: %v", team, err)
		}
		time.Sleep(time.Second)
	}
}

func restoreTeams(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
	tm := teamsOf(ctx)
	tm.writePolicy(ctx, t, tm.original)
	for _, ns := range []string{teamA, teamB} {
		_ = tm.cs.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	}
	return ctx
}

// setPolicy writes the original policy with the named teams granted.
func (tm *teams) setPolicy(ctx context.Context, t *testing.T, names ...string) {
	t.Helper()
	var p policy.Policy
	if err := yaml.UnmarshalStrict([]byte(tm.original), &p); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, teamA) {
		p.Callers = append(p.Callers, policy.Caller{Subject: "system:serviceaccounts:" + teamA, Snippets: true,
			ToolImages: []string{kindenv.AgentImage}, MaxInFlight: teamAInFlight, RequestsPerMinute: teamARate})
	}
	if slices.Contains(names, teamB) {
		p.Callers = append(p.Callers, policy.Caller{Subject: "system:serviceaccounts:" + teamB, Snippets: true,
			MaxInFlight: 2, RequestsPerMinute: 600, MaxTimeoutS: 30})
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	tm.writePolicy(ctx, t, string(b))
}

func (tm *teams) writePolicy(ctx context.Context, t *testing.T, data string) {
	t.Helper()
	cm, err := tm.cs.CoreV1().ConfigMaps(kindenv.Namespace).Get(ctx, policy.ConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[policy.Key] = data
	if _, err := tm.cs.CoreV1().ConfigMaps(kindenv.Namespace).Update(context.WithoutCancel(ctx), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// mint is a token of ns/sa for audience, asked again while the namespace's
// default ServiceAccount is still being made.
func (tm *teams) mint(ctx context.Context, t *testing.T, ns, sa, audience string) string {
	t.Helper()
	tok, err := Suite(ctx).Token(ctx, ns, sa, audience, "1h")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (tm *teams) client(token string) *client.Client {
	c, _ := client.New(tm.base, client.WithTokenSource(func(context.Context) (string, error) { return token, nil }))
	return c
}

func (tm *teams) run(ctx context.Context, token, code string, timeoutS int) (wire.Result, error) {
	return tm.client(token).Execute(ctx, wire.ExecuteRequest{Code: code, TimeoutS: &timeoutS})
}

// call sends req as the caller of token. A 504 whose tool pod was not
// Ready in time (nothing ran: a busy CI node can start the agent image more
// slowly than serve's deadline) is asked again, twice at most: the point
// here is who may call, not how fast a pod starts.
func (tm *teams) call(ctx context.Context, token string, req wire.CallRequest) (wire.CallResult, error) {
	for try := 1; ; try++ {
		res, err := tm.client(token).Call(ctx, req)
		if try == 3 || !isStatus(err, 504, "was not Ready within") {
			return res, err
		}
	}
}

// isStatus says whether err is the service's answer with status, its
// message holding want.
func isStatus(err error, status int, want string) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.StatusCode == status && strings.Contains(ce.Message, want)
}

// tally counts answers and keeps the latencies of those that ran.
type tally struct {
	ok, throttled, other int
	took                 []time.Duration
	errs                 []string
}

func (c *tally) add(took time.Duration, err error) {
	switch {
	case err == nil:
		c.ok++
		c.took = append(c.took, took)
	case isStatus(err, 429, ""):
		c.throttled++
	default:
		c.other++
		if len(c.errs) < 3 {
			c.errs = append(c.errs, err.Error())
		}
	}
}

func (c tally) String() string {
	slices.Sort(c.took)
	p := func(q float64) time.Duration {
		if len(c.took) == 0 {
			return 0
		}
		return c.took[min(len(c.took)-1, int(q*float64(len(c.took))))].Round(time.Millisecond)
	}
	return fmt.Sprintf("%d ran (p50 %s, p99 %s), %d throttled (429), %d other %v", c.ok, p(0.5), p(0.99), c.throttled, c.other, c.errs)
}

// flood has team A keep floodConcurrency requests going for a while, each
// retried after a 429 a moment later as a client would, while team B sends
// one at a time.
func (tm *teams) flood(ctx context.Context, t *testing.T) (flood, beside tally) {
	ctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range floodConcurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				_, err := tm.run(ctx, tm.tokens[teamA], "import time; time.sleep(0.5)", 10)
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				flood.add(time.Since(start), err)
				mu.Unlock()
				if err != nil {
					time.Sleep(200 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(2 * time.Second) // the flood under way
	// Team B's requests are counted whatever they take, also past the
	// flood's end: a request starved of pods shows as its 503.
	for ctx.Err() == nil {
		start := time.Now()
		_, err := tm.run(context.WithoutCancel(ctx), tm.tokens[teamB], "print(1)", 10)
		beside.add(time.Since(start), err)
		time.Sleep(time.Second)
	}
	stop()
	wg.Wait()
	return flood, beside
}
