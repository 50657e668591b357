package weaken

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		names  []string
		runner bool
		want   []string // Names(false); nil with wantErr
		wantRu []string // Names(true)
		err    bool
	}{
		{name: "none", names: nil},
		{name: "serve takes all", names: []string{"never-ready", "root-token", "kill-leader-only"},
			want: []string{"root-token", "kill-leader-only", "never-ready"}, wantRu: []string{"kill-leader-only"}},
		{name: "runner takes its own", names: []string{"kill-leader-only"}, runner: true,
			want: []string{"kill-leader-only"}, wantRu: []string{"kill-leader-only"}},
		{name: "runner takes unproven-ready", names: []string{"unproven-ready", "kill-leader-only"}, runner: true,
			want: []string{"kill-leader-only", "unproven-ready"}, wantRu: []string{"kill-leader-only", "unproven-ready"}},
		{name: "runner refuses a pod's", names: []string{"root-token"}, runner: true, err: true},
		{name: "unknown", names: []string{"everything"}, err: true},
		{name: "no free text", names: []string{"--listen=:8081"}, err: true},
		{name: "serve refuses the gateway's", names: []string{"egress-rebind"}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.names, tt.runner)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if got := s.Names(false); !slices.Equal(got, tt.want) {
				t.Errorf("Names(false) = %q, want %q", got, tt.want)
			}
			if got := s.Names(true); !slices.Equal(got, tt.wantRu) {
				t.Errorf("Names(true) = %q, want %q", got, tt.wantRu)
			}
		})
	}
	if g, err := ParseGateway([]string{"egress-rebind", "egress-no-sni"}); err != nil || !g.Has(EgressRebind) || !g.Has(EgressNoSNI) {
		t.Errorf("ParseGateway: %v", err)
	}
	if _, err := ParseGateway([]string{"egress-direct"}); err == nil {
		t.Error("the gateway took serve's weakening")
	}
	var zero Set
	if zero.Has(RootToken) || zero.Names(false) != nil {
		t.Error("the zero Set weakens something")
	}
}
