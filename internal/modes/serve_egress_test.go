package modes

import (
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/sandboxd/sandbox/internal/egress"
)

// --tool-images takes an egress per image, from the flag (repeated or
// with ;) and from SANDBOX_TOOL_IMAGES alike; the comma-separated list of
// images from before egress by name still parses.
func TestToolImagesEgressSyntax(t *testing.T) {
	def := egress.Egress{Mode: egress.Internet}
	for _, tt := range []struct {
		name string
		args []string
		env  string
		want map[string]string // image -> its egress
	}{
		{"old list", []string{"--tool-images", "a:1,reg.example/agents/"}, "", map[string]string{"a:1": "internet", "reg.example/agents/x": "internet"}},
		{"names", []string{"--tool-images", "a:1=api.example.com,*.example.org;b:1=none", "--tool-images", "c:1"}, "",
			map[string]string{"a:1": "api.example.com,*.example.org", "b:1": "none", "c:1": "internet"}},
		{"env", nil, "a:1=api.example.com,h.example:8443;b:1,c:1", map[string]string{"a:1": "api.example.com,h.example:8443", "b:1": "internet", "c:1": "internet"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("SANDBOX_TOOL_IMAGES", tt.env)
			c := parse(t, append([]string{"serve", "--backend", "local"}, tt.args...)...).Serve
			if err := c.ToolFlags.validate(); err != nil {
				t.Fatal(err)
			}
			ims, err := c.images()
			if err != nil {
				t.Fatal(err)
			}
			for image, want := range tt.want {
				if e, ok := ims.For(image, def); !ok || e.String() != want {
					t.Errorf("%s: egress %s (listed %v), want %s", image, e, ok, want)
				}
			}
		})
	}
	for _, tt := range []struct{ args []string }{
		{[]string{"--tool-images", "a:1,b:1=x.example"}},
		{[]string{"--tool-images", "a:1=x..example"}},
		{[]string{"--tool-images", "a:1=*"}},
		{[]string{"--tool-images", "*=none"}},
	} {
		var cli CLI
		p, err := kong.New(&cli, kong.Name("sandbox"), vars())
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Parse(append([]string{"serve", "--backend", "local"}, tt.args...))
		if err == nil {
			err = cli.Serve.ToolFlags.validate()
		}
		if err == nil || !strings.Contains(err.Error(), "--tool-images") {
			t.Errorf("%v: %v, want an error naming --tool-images", tt.args, err)
		}
	}
	c := parse(t, "serve", "--backend", "local", "--tool-default-egress", "none").Serve
	if e, _ := egress.Parse(c.ToolDefaultEgress); e.Mode != egress.None {
		t.Errorf("--tool-default-egress none: %s", e)
	}
}

// sandbox egress refuses bad flags with a message naming the flag.
func TestEgressFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"--deny", "10.0.0.0/33"}, "--deny"},
		{[]string{"--permit", "nonsense"}, "--permit"},
		{[]string{"--weaken", "egress-direct"}, "--weaken"},
		{[]string{"--max-conns-per-pod", "0"}, "--max-conns-per-pod"},
		{[]string{"--max-bytes-out-per-pod", "0"}, "--max-bytes-out-per-pod"},
	} {
		var cli CLI
		p, err := kong.New(&cli, kong.Name("sandbox"), vars())
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Parse(append([]string{"egress"}, tt.args...))
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%v: %v, want an error naming %s", tt.args, err, tt.says)
		}
	}
	c := parse(t, "egress", "--weaken", "egress-rebind", "--deny", "203.0.113.9,198.51.100.0/24").Egress
	if err := c.Validate(); err != nil {
		t.Errorf("good flags refused: %v", err)
	}
}
