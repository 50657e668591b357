package policy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/manifests"
)

var deployed = api.CallPolicy{Images: []string{"reg.example/agents/", "reg.example/tools/weather:1"}, ImagesSetting: "--tool-images"}

var (
	bot   = auth.Identity{User: "system:serviceaccount:agents:bot", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:agents"}}
	other = auth.Identity{User: "system:serviceaccount:agents:other", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:agents"}}
	lab   = auth.Identity{User: "system:serviceaccount:lab:x", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:lab"}}
)

const example = `
callers:
- subject: system:serviceaccounts:agents
  snippets: true
- subject: system:serviceaccount:agents:bot
  snippets: true
  toolImages: [reg.example/agents/weather:*, reg.example/tools/weather:1]
  maxInFlight: 2
  requestsPerMinute: 600
  maxTimeoutS: 20
`

func TestParseAndMatch(t *testing.T) {
	p, err := Parse([]byte(example), deployed)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := p.For(bot)
	if !ok || c.Subject != bot.User || c.MaxInFlight != 2 {
		t.Errorf("bot: %+v %v, want its own entry over its namespace's", c, ok)
	}
	c, ok = p.For(other)
	if !ok || c.Subject != "system:serviceaccounts:agents" || c.MaxInFlight != DefaultMaxInFlight || c.MaxTimeoutS != api.MaxTimeoutS {
		t.Errorf("other: %+v %v, want the namespace's entry with the defaults", c, ok)
	}
	if c, ok := p.For(lab); ok {
		t.Errorf("lab: %+v, want no entry", c)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"unknown field", "callers:\n- subject: system:serviceaccounts:a\n  snipets: true\n", "unknown field"},
		{"not a ServiceAccount", "callers:\n- subject: alice\n", "name a ServiceAccount"},
		{"twice", "callers:\n- subject: system:serviceaccounts:a\n- subject: system:serviceaccounts:a\n", "named twice"},
		{"image beyond the deployment's", "callers:\n- subject: system:serviceaccounts:a\n  toolImages: [reg.example/other:1]\n", "not within"},
		{"prefix beyond the deployment's", "callers:\n- subject: system:serviceaccounts:a\n  toolImages: [reg.example/*]\n", "not within"},
		{"timeout beyond the API's", "callers:\n- subject: system:serviceaccounts:a\n  maxTimeoutS: 999\n", "maxTimeoutS"},
		{"negative", "callers:\n- subject: system:serviceaccounts:a\n  maxInFlight: -1\n", "positive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Parse([]byte(c.yaml), deployed); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

func status(err error) int {
	if ae, ok := api.AsError(err); ok {
		return ae.Status
	}
	return 0
}

func TestGateGrants(t *testing.T) {
	g := NewGate()
	if _, _, err := g.Admit(bot, Snippet); status(err) != http.StatusServiceUnavailable {
		t.Fatalf("before a policy: %v, want 503", err)
	}
	p, err := Parse([]byte(example), deployed)
	if err != nil {
		t.Fatal(err)
	}
	g.Set(p)
	if _, _, err := g.Admit(lab, Snippet); status(err) != http.StatusForbidden || !strings.Contains(err.Error(), lab.User) {
		t.Errorf("unnamed caller: %v, want a 403 naming it", err)
	}
	if _, _, err := g.Admit(other, ToolCall); status(err) != http.StatusForbidden {
		t.Errorf("a caller granted no image calls a tool: %v, want 403", err)
	}
	c, done, err := g.Admit(bot, ToolCall)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for _, x := range []struct {
		image   string
		timeout time.Duration
		ok      bool
	}{
		{"reg.example/agents/weather:2", 10 * time.Second, true},
		{"reg.example/tools/weather:1", 20 * time.Second, true},
		{"reg.example/agents/search:1", 10 * time.Second, false},
		{"reg.example/agents/weather:2", 21 * time.Second, false},
	} {
		if err := c.Allows(bot, ToolCall, x.image, x.timeout); (err == nil) != x.ok {
			t.Errorf("%s for %s: %v, want allowed %v", x.image, x.timeout, err, x.ok)
		}
	}
}

// TestGateGrantTakesNoQuota: Grant answers as Admit does, and any number
// of Grants leave the caller's quota whole.
func TestGateGrantTakesNoQuota(t *testing.T) {
	g := NewGate()
	if _, err := g.Grant(bot, Snippet); status(err) != http.StatusServiceUnavailable {
		t.Fatalf("before a policy: %v, want 503", err)
	}
	g.Set(&Policy{Callers: []Caller{{Subject: bot.User, Snippets: true, MaxInFlight: 1, RequestsPerMinute: 1, MaxTimeoutS: 10}}})
	if _, err := g.Grant(lab, Snippet); status(err) != http.StatusForbidden {
		t.Errorf("unnamed caller: %v, want 403", err)
	}
	if _, err := g.Grant(bot, ToolCall); status(err) != http.StatusForbidden {
		t.Errorf("a caller granted no image: %v, want 403", err)
	}
	for range 5 {
		if c, err := g.Grant(bot, Snippet); err != nil || c.Subject != bot.User {
			t.Fatalf("grant: %+v %v", c, err)
		}
	}
	if _, done, err := g.Admit(bot, Snippet); err != nil {
		t.Errorf("admit after grants: %v, want the whole quota left", err)
	} else {
		done()
	}
}

func TestGateQuotas(t *testing.T) {
	p, err := Parse([]byte(example), deployed)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate()
	g.Set(p)
	// In flight: bot's entry takes 2.
	_, done1, err1 := g.Admit(bot, Snippet)
	_, done2, err2 := g.Admit(bot, Snippet)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	_, _, err = g.Admit(bot, Snippet)
	if ae, ok := api.AsError(err); !ok || ae.Status != http.StatusTooManyRequests || ae.RetryAfter <= 0 {
		t.Fatalf("third in flight: %v, want 429 with Retry-After", err)
	}
	// Another caller's entry is not touched by bot's use.
	if _, done, err := g.Admit(other, Snippet); err != nil {
		t.Errorf("other caller beside a busy one: %v", err)
	} else {
		done()
	}
	done1()
	done1() // twice is once
	if _, done, err := g.Admit(bot, Snippet); err != nil {
		t.Errorf("after one ended: %v", err)
	} else {
		done()
	}
	done2()

	// Rate: 1 a minute with a burst of 1 allows one, then says when.
	g.Set(&Policy{Callers: []Caller{{Subject: bot.User, Snippets: true, MaxInFlight: 1, RequestsPerMinute: 1, MaxTimeoutS: 10}}})
	_, done, err := g.Admit(bot, Snippet)
	if err != nil && status(err) != http.StatusTooManyRequests {
		t.Fatal(err)
	}
	if err == nil {
		done()
	}
	_, _, err = g.Admit(bot, Snippet)
	if ae, ok := api.AsError(err); !ok || ae.Status != http.StatusTooManyRequests || ae.RetryAfter < 30*time.Second {
		t.Errorf("over the rate: %v, want 429 with a Retry-After near a minute", err)
	}
}

// TestWatchFollowsTheConfigMap: the gate takes the ConfigMap's policy,
// follows an edit, keeps the last good policy through an invalid edit and
// refuses everyone once the ConfigMap is gone.
func TestWatchFollowsTheConfigMap(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMap, Namespace: "sandbox"},
		Data: map[string]string{Key: "callers:\n- subject: system:serviceaccounts:agents\n  snippets: true\n"}}
	cs := fake.NewClientset(cm)
	g := NewGate()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Watch(ctx, cs, "sandbox", deployed, g, slog.New(slog.NewTextHandler(io.Discard, nil)))
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 5s: %s", what)
			}
		}
	}
	admits := func(id auth.Identity) bool {
		_, done, err := g.Admit(id, Snippet)
		if err == nil {
			done()
		}
		return err == nil
	}
	eventually("agents admitted", func() bool { return admits(bot) })
	if admits(lab) {
		t.Error("lab admitted before it was granted")
	}
	update := func(data string) {
		t.Helper()
		cm = cm.DeepCopy()
		cm.Data[Key] = data
		if _, err := cs.CoreV1().ConfigMaps("sandbox").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update("callers:\n- subject: system:serviceaccounts:lab\n  snippets: true\n")
	eventually("the edit applied", func() bool { return admits(lab) && !admits(bot) })
	update("callers: [ {subject: nobody} ]")
	time.Sleep(200 * time.Millisecond)
	if !admits(lab) {
		t.Error("an invalid edit dropped the policy before it")
	}
	if err := cs.CoreV1().ConfigMaps("sandbox").Delete(ctx, ConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("everyone refused", func() bool {
		_, _, err := g.Admit(lab, Snippet)
		return status(err) == http.StatusServiceUnavailable && strings.Contains(err.Error(), "gone")
	})
}

// TestShippedPolicy: the manifests' policy parses, grants the namespace
// agents snippets and no tool, and verify's callers what its checks need.
func TestShippedPolicy(t *testing.T) {
	objs, err := manifests.Objects(manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var data string
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == ConfigMap {
			data = cm.Data[Key]
		}
	}
	p, err := Parse([]byte(data), deployed)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	agent, ok := p.For(bot)
	if !ok || !agent.Snippets || len(agent.ToolImages) != 0 {
		t.Errorf("agents: %+v %v, want snippets and no tool", agent, ok)
	}
	v, ok := p.For(auth.Identity{User: "system:serviceaccount:sandbox:sandbox-verify"})
	if !ok || v.Allows(auth.Identity{}, ToolCall, "reg.example/agents/any:1", time.Minute) != nil {
		t.Errorf("verify: %+v %v, want every tool image", v, ok)
	}
	l, ok := p.For(auth.Identity{User: "system:serviceaccount:sandbox:sandbox-verify-limited"})
	if !ok || l.MaxInFlight != 1 || l.Allows(auth.Identity{}, ToolCall, "", 0) == nil {
		t.Errorf("verify-limited: %+v %v, want one in flight and no tool", l, ok)
	}
	if _, ok := p.For(auth.Identity{User: "system:serviceaccount:sandbox:default", Groups: []string{"system:serviceaccounts:sandbox"}}); ok {
		t.Error("the sandbox namespace's default ServiceAccount is granted")
	}
}
