// Package weaken is the closed set of deliberate weakenings: named switches
// that make a deployment less safe on purpose, so that the e2e suite can show
// each of verify's checks able to fail and the pool's answer when it has no
// Ready pod. No real deployment sets one. serve passes a runner's weakening
// to the pods' runner by its name; there is no way to hand it free text.
package weaken

import (
	"fmt"
	"slices"
	"strings"
)

// Name names one weakening, as given to --weaken.
type Name string

// The weakenings.
const (
	// RootToken runs snippet pods as uid 0 with the service-account token
	// mounted (the namespace must be relaxed to admit them): the posture,
	// identity and token checks must fail.
	RootToken Name = "root-token"
	// KillLeaderOnly makes the runner kill only python3 at the deadline, not
	// its process tree, and the pool wait for the runner's answer however
	// late, instead of answering for it and deleting the pod (which kills
	// the tree another way): runner/timeout-kills-tree and
	// runner/fork-bomb-answered must fail. serve hands it to the pods'
	// runner.
	KillLeaderOnly Name = "kill-leader-only"
	// NeverReady makes the pods' runner listen on another port than the one
	// its readiness probe and the pool use, so no pod of the pool ever gets
	// Ready and requests meet the empty pool's 503.
	NeverReady Name = "never-ready"
	// ToolRootToken runs tool-call pods as uid 0 with the service-account
	// token mounted (the namespace must be relaxed to admit them):
	// toolcalls/non-root and toolcalls/no-credentials must fail.
	ToolRootToken Name = "tool-root-token"
	// UnprovenReady makes the pods' runner report Ready, and take its job,
	// without proving its egress cut: on a cluster whose NetworkPolicies are
	// gone, pods then run snippets on an open network, and verify's network
	// checks must fail. serve hands it to the pods' runner.
	UnprovenReady Name = "unproven-ready"
	// AllowICMP keeps the container runtime's ping_group_range in snippet
	// and tool pods (every group may open an ICMP echo socket) and leaves
	// the echo out of their runner's proof: network/icmp and toolcalls/icmp
	// must fail where the engine passes echo, as kube-router does.
	AllowICMP Name = "allow-icmp"
	// Unfenced makes serve's fence want nothing: it takes its excepts of
	// the nodes' and API server's addresses out of the tool pods' internet
	// policy, and tool pods no longer prove them cut, so
	// toolcalls/node-addresses must fail where one is public.
	Unfenced Name = "unfenced"

	// Tool egress by name (package egress). serve applies these two:
	// EgressDirect gives a tool pod with names the internet policy's label
	// besides its proxy, so toolcalls/no-direct-egress must fail;
	// EgressClusterDNS leaves it the cluster DNS, so toolcalls/no-own-dns
	// must fail.
	EgressDirect     Name = "egress-direct"
	EgressClusterDNS Name = "egress-cluster-dns"
	// The gateway (`sandbox egress --weaken`) applies these:
	// EgressAllowAll lets every pod reach every name
	// (toolcalls/name-not-allowed must fail), EgressRefuseAll refuses every
	// name (toolcalls/egress-by-name must fail), EgressRebind dials any
	// answer (toolcalls/rebinding-refused must fail), EgressNoSNI skips the
	// ClientHello's check (toolcalls/sni-mismatch-refused must fail).
	EgressAllowAll  Name = "egress-allow-all"
	EgressRefuseAll Name = "egress-refuse-all"
	EgressRebind    Name = "egress-rebind"
	EgressNoSNI     Name = "egress-no-sni"
)

// Who applies a weakening.
const (
	byServe   = "serve"
	byRunner  = "runner"
	byGateway = "gateway"
)

// all is the closed set, in the order help and errors list it; runner says
// which of them `sandbox run` applies itself (the others shape the pod).
var all = []struct {
	name Name
	by   string
}{
	{RootToken, byServe},
	{KillLeaderOnly, byRunner},
	{NeverReady, byServe},
	{ToolRootToken, byServe},
	{UnprovenReady, byRunner},
	{AllowICMP, byServe},
	{Unfenced, byServe},
	{EgressDirect, byServe},
	{EgressClusterDNS, byServe},
	{EgressAllowAll, byGateway},
	{EgressRefuseAll, byGateway},
	{EgressRebind, byGateway},
	{EgressNoSNI, byGateway},
}

// takes reports whether the mode (runner, or serve) accepts a weakening
// applied by by: serve takes its own and its runners'.
func takes(by string, runner bool) bool {
	if runner {
		return by == byRunner
	}
	return by != byGateway
}

// Set is the weakenings in force; the zero Set is a safe deployment.
type Set struct{ on map[Name]bool }

// Parse checks names against the closed set and returns the Set they ask
// for. With runner, only the weakenings the runner applies itself are
// accepted (`sandbox run`); without it, all of them (`sandbox serve`).
func Parse(names []string, runner bool) (Set, error) {
	s := Set{on: map[Name]bool{}}
	for _, n := range names {
		known := false
		for _, w := range all {
			if string(w.name) == n && takes(w.by, runner) {
				known = true
			}
		}
		if !known {
			return Set{}, fmt.Errorf("unknown weakening %q: the known ones are %s", n, List(runner))
		}
		s.on[Name(n)] = true
	}
	return s, nil
}

// List names the weakenings Parse accepts, comma-separated, for help and
// errors.
func List(runner bool) string {
	var names []string
	for _, w := range all {
		if takes(w.by, runner) {
			names = append(names, string(w.name))
		}
	}
	return strings.Join(names, ", ")
}

// ParseGateway is Parse for the egress gateway, which takes its own only.
func ParseGateway(names []string) (Set, error) {
	s := Set{on: map[Name]bool{}}
	for _, n := range names {
		if !slices.ContainsFunc(all, func(w struct {
			name Name
			by   string
		}) bool {
			return string(w.name) == n && w.by == byGateway
		}) {
			return Set{}, fmt.Errorf("unknown weakening %q: the gateway's are %s", n, ListGateway())
		}
		s.on[Name(n)] = true
	}
	return s, nil
}

// ListGateway names the gateway's weakenings, comma-separated.
func ListGateway() string {
	var names []string
	for _, w := range all {
		if w.by == byGateway {
			names = append(names, string(w.name))
		}
	}
	return strings.Join(names, ", ")
}

// Has reports whether n is in force.
func (s Set) Has(n Name) bool { return s.on[n] }

// Names lists the weakenings in force, for a warning in the log; with
// runner, only those the runner applies (what serve passes to the pods'
// runner). nil when there are none.
func (s Set) Names(runner bool) []string {
	var names []string
	for _, w := range all {
		if s.on[w.name] && (!runner || w.by == byRunner) {
			names = append(names, string(w.name))
		}
	}
	return names
}
