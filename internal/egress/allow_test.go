package egress

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{in: "none", want: "none"},
		{in: " Internet ", want: "internet"},
		{in: "API.Example.com.", want: "api.example.com"},
		{in: "api.example.com,*.example.org,host.example:8443", want: "api.example.com,*.example.org,host.example:8443"},
		{in: "a.example,a.example", want: "a.example"},
		{in: "203.0.113.7", want: "203.0.113.7"},
		{in: "203.0.113.7:8443", want: "203.0.113.7:8443"},
		{in: "2001:db8::1", want: "2001:db8::1"},
		{in: "[2001:db8::1]", want: "2001:db8::1"},
		{in: "[2001:db8::1]:8443", want: "[2001:db8::1]:8443"},
		{in: "", err: "empty egress"},
		{in: "a.example,,b.example", err: "empty name"},
		{in: "a.example,none", err: "stands alone"},
		{in: "a.example:0", err: "port"},
		{in: "a.example:99999", err: "port"},
		{in: "a.example:", err: "port"},
		{in: "*.com", err: "two labels"},
		{in: "a.*.example", err: "only letters"},
		{in: "bücher.example", err: "xn--"},
		{in: "-a.example", err: "neither starts"},
		{in: "a..example", err: "1 to 63"},
		{in: "1.2.3", err: "all-numeric"},
		{in: "fe80::1%eth0", err: "zone"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			e, err := Parse(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse(%q) = %v, %v; want an error with %q", tt.in, e, err, tt.err)
				}
				return
			}
			if err != nil || e.String() != tt.want {
				t.Fatalf("Parse(%q) = %q, %v; want %q", tt.in, e.String(), err, tt.want)
			}
			again, err := Parse(e.String())
			if err != nil || again.String() != e.String() {
				t.Fatalf("Parse(String()) = %q, %v: not a round trip", again.String(), err)
			}
		})
	}
}

func TestAllows(t *testing.T) {
	e, err := Parse("api.example.com,*.example.org,h.example:8443,203.0.113.7,[2001:db8::1]:8443")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		host string
		port int
		want bool
	}{
		{"api.example.com", 443, true},
		{"api.example.com", 80, true},
		{"api.example.com", 8443, false},
		{"x.api.example.com", 443, false},
		{"example.com", 443, false},
		{"a.example.org", 443, true},
		{"a.b.example.org", 80, true},
		{"example.org", 443, false},
		{"evilexample.org", 443, false},
		{"h.example", 8443, true},
		{"h.example", 443, false},
		{"203.0.113.7", 443, true},
		{"203.0.113.8", 443, false},
		{"2001:db8::1", 8443, true},
		{"2001:db8::1", 443, false},
	} {
		if got := e.Allows(tt.host, tt.port); got != tt.want {
			t.Errorf("Allows(%s, %d) = %v, want %v", tt.host, tt.port, got, tt.want)
		}
	}
	if (Egress{Mode: None}).Allows("api.example.com", 443) || (Egress{}).Allows("api.example.com", 443) {
		t.Error("none (or the zero Egress) allows a name")
	}
	if !(Egress{Mode: Internet}).Allows("anything.example", 9999) {
		t.Error("internet refuses a name")
	}
}

func TestParseImages(t *testing.T) {
	ims, err := ParseImages([]string{"reg.example/agents/,agent:dev", "reg.example/agents/web=api.example.com,*.example.org; reg.example/agents/calc=none", "reg.example/net*=internet"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ims.Patterns(), " "); got != "reg.example/agents/ agent:dev reg.example/agents/web reg.example/agents/calc reg.example/net*" {
		t.Fatalf("patterns %q", got)
	}
	def := Egress{Mode: Internet}
	for _, tt := range []struct {
		image, want string
		ok          bool
	}{
		{"agent:dev", "internet", true},
		{"reg.example/agents/web", "api.example.com,*.example.org", true},
		{"reg.example/agents/calc", "none", true},
		{"reg.example/agents/other:1", "internet", true},
		{"reg.example/netx:1", "internet", true},
		{"elsewhere:1", "internet", false},
	} {
		e, ok := ims.For(tt.image, def)
		if e.String() != tt.want || ok != tt.ok {
			t.Errorf("For(%s) = %s, %v; want %s, %v", tt.image, e, ok, tt.want, tt.ok)
		}
	}
	if e, _ := ims.For("agent:dev", Egress{Mode: None}); e.Mode != None {
		t.Errorf("an image given no egress has %s, want the default none", e)
	}
	// The longest prefix wins over a shorter one.
	ims, _ = ParseImages([]string{"reg.example/=none;reg.example/web/=a.example"})
	if e, _ := ims.For("reg.example/web/x:1", def); e.String() != "a.example" {
		t.Errorf("longest prefix: got %s", e)
	}

	for _, tt := range []struct{ in, err string }{
		{"a:1,b:1=x.example", "stands alone"},
		{"=x.example", "no image"},
		{"a:1=", "empty egress"},
		{"a:1=x..example", "1 to 63"},
		{"a:1;a:1=none", "twice"},
	} {
		if _, err := ParseImages([]string{tt.in}); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseImages(%q) = %v, want an error with %q", tt.in, err, tt.err)
		}
	}
}

func TestWithin(t *testing.T) {
	outer, _ := Parse("api.example.com,*.example.org,h.example:8443")
	for _, tt := range []struct {
		inner string
		want  bool
	}{
		{"none", true},
		{"api.example.com", true},
		{"api.example.com:443", true},
		{"a.example.org,*.b.example.org", true},
		{"*.example.org", true},
		{"h.example:8443", true},
		{"h.example", false},
		{"api.example.com:8443", false},
		{"example.org", false},
		{"*.org.example", false},
		{"other.example", false},
		{"internet", false},
	} {
		inner, err := Parse(tt.inner)
		if err != nil {
			t.Fatal(err)
		}
		if got := inner.Within(outer); got != tt.want {
			t.Errorf("%s within %s: %v, want %v", tt.inner, outer, got, tt.want)
		}
	}
	inner, _ := Parse("anything.example")
	if !inner.Within(Egress{Mode: Internet}) || inner.Within(Egress{Mode: None}) {
		t.Error("a list within internet and none")
	}
}
