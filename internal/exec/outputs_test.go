package exec

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/wire"
)

func TestValidatePattern(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		ok      bool
	}{
		{"*.png", true},
		{"out/**", true},
		{"**/*.csv", true},
		{"run-?.txt", true},
		{"[ab].txt", true},
		{"a/**/b/*.json", true},
		{"", false},
		{"/etc/*", false},
		{"../*", false},
		{"out/../../x", false},
		{"./x", false},
		{"a//b", false},
		{"x\x00", false},
		{"[a", false},
		{"a/[", false},
		{strings.Repeat("d/", wire.MaxPathLen/2) + "f", false},
	} {
		if err := ValidatePattern(tt.pattern); (err == nil) != tt.ok {
			t.Errorf("ValidatePattern(%q) = %v, want ok=%v", tt.pattern, err, tt.ok)
		}
	}
	if err := CheckOutputs(make([]string, MaxOutputPatterns+1)); err == nil {
		t.Error("too many patterns accepted")
	}
}

// TestCheckOutputsComponents: the patterns' components are bounded
// together, a run of "**" counted once, so that no job can make the walk
// step thousands of positions for each entry it reads.
func TestCheckOutputsComponents(t *testing.T) {
	stars := strings.Repeat("**/", 340) + "x" // 1,021 bytes, 2 components
	alternating := func(n int) string {       // n components: **/*/**/*/...
		return strings.TrimSuffix(strings.Repeat("**/*/", n/2)+strings.Repeat("**/", n%2), "/")
	}
	many := func(p string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = p
		}
		return out
	}
	for _, tt := range []struct {
		what     string
		patterns []string
		ok       bool
	}{
		{"32 runs of 341 \"**\"", many(stars, MaxOutputPatterns), true},
		{"at the bound", many(alternating(MaxOutputComponents/MaxOutputPatterns), MaxOutputPatterns), true},
		{"one past it", append(many(alternating(MaxOutputComponents/MaxOutputPatterns), MaxOutputPatterns-1), alternating(MaxOutputComponents/MaxOutputPatterns+1)), false},
		{"one long pattern", []string{alternating(MaxOutputComponents + 1)}, false},
	} {
		err := CheckOutputs(tt.patterns)
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok=%v", tt.what, err, tt.ok)
		}
	}
	if m := newMatcher(many(stars, MaxOutputPatterns)); len(m.mark) != 2*MaxOutputPatterns {
		t.Errorf("runs of \"**\": %d positions, want them counted once (%d)", len(m.mark), 2*MaxOutputPatterns)
	}
}

// TestMatcherSetsBounded walks deep into a tree with the worst patterns
// allowed: each set of states holds a position at most once.
func TestMatcherSetsBounded(t *testing.T) {
	m := newMatcher(worstPatterns())
	states := m.start()
	for depth := range 200 {
		_, _, next := m.step(states, "d")
		if len(next) > len(m.mark) {
			t.Fatalf("depth %d: %d states, more than the %d positions", depth, len(next), len(m.mark))
		}
		seen := map[mstate]bool{}
		for _, st := range next {
			if seen[st] {
				t.Fatalf("depth %d: state %v twice", depth, st)
			}
			seen[st] = true
		}
		states = next
	}
	if len(states) < MaxOutputComponents/2 {
		t.Fatalf("%d states at depth 200: the test's patterns are not the worst case", len(states))
	}
}

// worstPatterns are as many positions as CheckOutputs allows, each live
// at every depth: "**/*/**/*/...".
func worstPatterns() []string {
	p := strings.TrimSuffix(strings.Repeat("**/*/", MaxOutputComponents/MaxOutputPatterns/2), "/")
	out := make([]string, MaxOutputPatterns)
	for i := range out {
		out[i] = p
	}
	if err := CheckOutputs(out); err != nil {
		panic(err)
	}
	return out
}

// BenchmarkMatcherWorst is one entry deep in a tree stepped through the
// worst patterns allowed; the walk reads at most maxOutputScan entries.
func BenchmarkMatcherWorst(b *testing.B) {
	m := newMatcher(worstPatterns())
	states := m.start()
	for range 100 {
		_, _, states = m.step(states, "d")
	}
	for b.Loop() {
		m.step(states, "d")
	}
	b.ReportMetric(float64(len(states)), "states")
}

// matches walks path's components through the matcher as the collector
// does, with the entry a file.
func matches(m *matcher, path string) bool {
	states := m.start()
	cs := strings.Split(path, "/")
	for i, c := range cs {
		match, _, next := m.step(states, c)
		if i == len(cs)-1 {
			return match
		}
		if len(next) == 0 {
			return false
		}
		states = next
	}
	return false
}

func TestMatcher(t *testing.T) {
	for _, tt := range []struct {
		patterns []string
		path     string
		want     bool
	}{
		{[]string{"*.png"}, "a.png", true},
		{[]string{"*.png"}, "d/a.png", false},
		{[]string{"*"}, ".hidden", true},
		{[]string{"out/*"}, "out/a.csv", true},
		{[]string{"out/*"}, "out/d/a.csv", false},
		{[]string{"out/**"}, "out/a.csv", true},
		{[]string{"out/**"}, "out/d/e/a.csv", true},
		{[]string{"out/**"}, "out", false},
		{[]string{"out/**"}, "other/a.csv", false},
		{[]string{"**"}, "a/b/c", true},
		{[]string{"**/*.csv"}, "x.csv", true},
		{[]string{"**/*.csv"}, "a/b/x.csv", true},
		{[]string{"**/*.csv"}, "a/b/x.png", false},
		{[]string{"a/**/b/*.json"}, "a/b/x.json", true},
		{[]string{"a/**/b/*.json"}, "a/1/2/b/x.json", true},
		{[]string{"a/**/b/*.json"}, "a/1/2/c/x.json", false},
		{[]string{"**/**/x"}, "x", true},
		{[]string{"**/**/**/x"}, "a/b/x", true},
		{[]string{"a/**/**"}, "a/b", true},
		{[]string{"a/**/**"}, "a", false},
		{[]string{"*.png", "data/*.csv"}, "data/r.csv", true},
		{[]string{"run-?.txt"}, "run-10.txt", false},
	} {
		if got := matches(newMatcher(tt.patterns), tt.path); got != tt.want {
			t.Errorf("%q against %q: %v, want %v", tt.patterns, tt.path, got, tt.want)
		}
	}
}
