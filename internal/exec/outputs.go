package exec

import (
	"fmt"
	"path"
	"strings"

	"github.com/sandboxd/sandbox/wire"
)

// Files out: a job names patterns (Job.Outputs), and after the run the
// files of its working directory that match come back in the wire.Result, read
// by CollectOutputs (collect.go), within these bounds.
const (
	// MaxOutputPatterns bounds Job.Outputs: every directory entry walked is
	// matched against each, and a handful is what a caller needs.
	MaxOutputPatterns = 32
	// MaxOutputFiles is how many files come back with their content: as
	// many as a job may send in (MaxFiles).
	MaxOutputFiles = 100
	// MaxOutputBytes bounds the content of those files in all: a chart or
	// a result table fits many times over, and the answer that carries it
	// (at most twice this once encoded, see wire.EncodeContent) is held in
	// memory by the runner and by serve while it is sent.
	MaxOutputBytes = 10 << 20
	// MaxOutputEntries bounds the listing: files with content, omitted and
	// skipped ones together. Beyond it matches are not even named.
	MaxOutputEntries = 1000
	// maxOutputDepth bounds how deep the walk goes: one open descriptor per
	// level, and far deeper than any real output tree.
	maxOutputDepth = 64
	// maxOutputScan bounds the directory entries the walk reads, so that a
	// run that made a million files costs the collector a bounded time.
	maxOutputScan = 50_000
	// MaxOutputComponents bounds the components of all patterns together
	// (a run of "**" counts as one): the matcher steps each live position
	// in a pattern for every entry the walk reads, and real patterns have
	// a few components each.
	MaxOutputComponents = 256
)

// doubleStar is the pattern component that matches any number of
// directories, none included.
const doubleStar = "**"

// ValidatePattern reports whether p may name outputs: a path as
// wire.ValidatePath allows (so no pattern can reach outside the working
// directory), whose components are path.Match patterns ("*.png",
// "run-?.csv", "[ab].txt") or "**", any number of directories.
func ValidatePattern(p string) error {
	return wire.CheckRelative(p, "pattern", func(c string) error {
		if _, err := path.Match(c, ""); err != nil {
			return fmt.Errorf("bad component %q: %w", c, err)
		}
		return nil
	})
}

// CheckOutputs validates a job's patterns before anything runs: how many,
// each one, and their components together.
func CheckOutputs(patterns []string) error {
	if len(patterns) > MaxOutputPatterns {
		return fmt.Errorf("too many outputs: %d patterns, at most %d", len(patterns), MaxOutputPatterns)
	}
	n := 0
	for i, p := range patterns {
		if err := ValidatePattern(p); err != nil {
			return fmt.Errorf("outputs[%d]: %w", i, err)
		}
		n += len(components(p))
	}
	if n > MaxOutputComponents {
		return fmt.Errorf("outputs: %d path components in all, at most %d (a run of \"**\" counts as one)", n, MaxOutputComponents)
	}
	return nil
}

// components splits a valid pattern, a run of "**" as one: "**/**"
// matches what "**" does.
func components(p string) []string {
	var cs []string
	for c := range strings.SplitSeq(p, "/") {
		if c == doubleStar && len(cs) > 0 && cs[len(cs)-1] == doubleStar {
			continue
		}
		cs = append(cs, c)
	}
	return cs
}

// matcher matches a walk's entries against the patterns, one component at
// a time, so that the walk enters only directories some pattern can match
// below. A set of states holds each position at most once, so stepping it
// costs at most the patterns' components (MaxOutputComponents).
type matcher struct {
	pats [][]string
	base []int    // pats[p][i] is position base[p]+i
	mark []uint32 // mark[pos] == gen: pos is in the set being built
	gen  uint32
}

// mstate is a position in one pattern: component i is next.
type mstate struct{ p, i int }

func newMatcher(patterns []string) *matcher {
	m := &matcher{}
	n := 0
	for _, p := range patterns {
		cs := components(p)
		m.pats = append(m.pats, cs)
		m.base = append(m.base, n)
		n += len(cs)
	}
	m.mark = make([]uint32, n)
	return m
}

// newSet begins a set of states: none of the marks stands.
func (m *matcher) newSet() {
	m.gen++
	if m.gen == 0 { // wrapped: old marks could pass for new ones
		clear(m.mark)
		m.gen = 1
	}
}

// start is the states at the top of the working directory.
func (m *matcher) start() []mstate {
	m.newSet()
	var s []mstate
	for p := range m.pats {
		s = m.add(s, mstate{p, 0})
	}
	return s
}

// add appends st to the set being built, and, since "**" may match no
// directory at all, the states past each "**" it stands on.
func (m *matcher) add(states []mstate, st mstate) []mstate {
	for {
		pos := m.base[st.p] + st.i
		if m.mark[pos] == m.gen {
			return states
		}
		m.mark[pos] = m.gen
		states = append(states, st)
		cs := m.pats[st.p]
		if cs[st.i] != doubleStar || st.i+1 == len(cs) {
			return states
		}
		st.i++
	}
}

// step matches an entry named name against states. match: some pattern
// ends at it; named: one ends at it with a component other than "**", so
// that naming a directory there is worth reporting; next: the states for
// the entry's children if it is a directory (none: do not enter it).
func (m *matcher) step(states []mstate, name string) (match, named bool, next []mstate) {
	m.newSet()
	for _, st := range states {
		cs := m.pats[st.p]
		last := st.i == len(cs)-1
		switch c := cs[st.i]; {
		case c == doubleStar:
			match = match || last
			next = m.add(next, st)
		case matchComponent(c, name):
			if last {
				match, named = true, true
			} else {
				next = m.add(next, mstate{st.p, st.i + 1})
			}
		}
	}
	return match, named, next
}

// matchComponent is path.Match on one component; ValidatePattern has
// refused every pattern it would call malformed.
func matchComponent(pattern, name string) bool {
	ok, _ := path.Match(pattern, name)
	return ok
}
