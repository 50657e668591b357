package verify

import (
	"encoding/json"
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
	"github.com/sandboxd/sandbox/wire"
)

// fakeService answers as serve would with the shipped policy, or, open,
// as serve --auth none: everything runs.
func fakeService(t *testing.T, open bool) *httptest.Server {
	var limitedInFlight atomic.Int32
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		caller, _, _ := strings.Cut(tok, "@")
		if !open {
			switch {
			case tok == "":
				api.WriteError(w, 401, "no token")
				return
			case !strings.HasSuffix(tok, "@sandbox"):
				api.WriteError(w, 401, "wrong audience")
				return
			case caller == "default":
				api.WriteError(w, 403, "system:serviceaccount:sandbox:default is not a caller this service's policy names")
				return
			case caller == limitedCaller && r.URL.Path == "/v1/call":
				api.WriteError(w, 403, "may not call tools here")
				return
			case caller == limitedCaller:
				if limitedInFlight.Add(1) > 1 {
					limitedInFlight.Add(-1)
					(&api.Error{Status: 429, Msg: "too many requests in flight", RetryAfter: time.Second}).Write(w)
					return
				}
				defer limitedInFlight.Add(-1)
			}
		}
		if r.URL.Path == "/v1/call" && (body["function"] == nil || body["function"] == "") {
			api.WriteError(w, 400, "missing function")
			return
		}
		if code, _ := body["code"].(string); strings.Contains(code, "sleep") {
			time.Sleep(quotaHold)
		}
		api.WriteJSON(w, 200, wire.Result{SandboxID: "sb"})
	}))
}

// tokens mints "<sa>@<audience>" for any ServiceAccount but "gone".
func tokens() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenRequest)
		name := a.(k8stesting.CreateActionImpl).Name
		tr.Status.Token = name + "@" + tr.Spec.Audiences[0]
		return true, tr, nil
	})
	return cs
}

// TestCheckAuth: against a service that enforces the policy every auth
// check passes; against an open one (--auth none) every one fails.
func TestCheckAuth(t *testing.T) {
	for _, c := range []struct {
		name string
		open bool
		want Status
	}{{"enforced", false, Pass}, {"auth none", true, Fail}} {
		t.Run(c.name, func(t *testing.T) {
			srv := fakeService(t, c.open)
			defer srv.Close()
			e := &env{opts: Options{Namespace: "sandbox", Caller: DefaultCaller, Audience: "sandbox", ToolImage: "agent:dev"},
				cs: tokens(), sb: newHTTPSandbox(srv.URL, DefaultCaller+"@sandbox"), target: map[string]string{}, start: time.Now()}
			rs := checkAuth(t.Context(), e)
			if len(rs) != len(authChecks) {
				t.Fatalf("%d results, want %d", len(rs), len(authChecks))
			}
			for _, r := range rs {
				if r.Status != c.want {
					t.Errorf("%s: %s: %s", r.Name, r.Status, r.Evidence)
				}
			}
		})
	}
}
