package policy

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/egress"
)

// A caller's entry may narrow an image's egress (none, or names the
// deployment's list allows), never widen it; its images still match as
// without the egress.
func TestCallerEgress(t *testing.T) {
	ims, err := egress.ParseImages([]string{"reg.example/agents/=api.example.com,*.example.org;reg.example/tools/weather:1"})
	if err != nil {
		t.Fatal(err)
	}
	dep := api.CallPolicy{Images: ims.Patterns(), ImagesSetting: "--tool-images",
		EgressOf: func(image string) string {
			e, _ := ims.For(image, egress.Egress{Mode: egress.Internet})
			return e.String()
		}}
	p, err := Parse([]byte(`
callers:
  - subject: system:serviceaccount:agents:web
    toolImages: ["reg.example/agents/=a.example.org", "reg.example/tools/weather:1=none"]
  - subject: system:serviceaccount:agents:all
    toolImages: ["*"]
`), dep)
	if err != nil {
		t.Fatal(err)
	}
	web := p.Callers[0]
	if err := web.Allows(auth.Identity{User: "web"}, ToolCall, "reg.example/agents/x:1", 0); err != nil {
		t.Errorf("an image under a prefix with an egress is refused: %v", err)
	}
	for image, want := range map[string]string{"reg.example/agents/x:1": "a.example.org", "reg.example/tools/weather:1": "none", "other:1": ""} {
		if got := web.EgressFor(image); got != want {
			t.Errorf("EgressFor(%s) = %q, want %q", image, got, want)
		}
	}
	if got := p.Callers[1].EgressFor("reg.example/agents/x:1"); got != "" {
		t.Errorf("a caller with * narrows to %q", got)
	}

	for _, tt := range []struct{ entry, says string }{
		{"reg.example/agents/=internet", "wider"},
		{"reg.example/agents/=other.example", "wider"},
		{"reg.example/agents/=*.org", "two labels"},
		{"reg.example/agents/=api.example.com;x", "one image per entry"},
	} {
		_, err := Parse([]byte("callers:\n  - subject: system:serviceaccount:agents:web\n    toolImages: [\""+tt.entry+"\"]\n"), dep)
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v, want an error saying %q", tt.entry, err, tt.says)
		}
	}
	var ae *api.Error
	err = web.Allows(auth.Identity{User: "web"}, ToolCall, "other:1", 0)
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Errorf("an image outside the entry: %v", err)
	}
}
