// Package kube holds what the service needs to talk to Kubernetes: the client
// configuration, the names shared with the manifests and the e2e suite, the
// sandbox pod template and small helpers that read a pod's status.
package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Names shared by the pool, the manifests, the e2e suite and verify.
// Changing one breaks the NetworkPolicies in manifests/ that select on it.
const (
	// LabelName is the well-known name label; RunnerName marks sandbox pods,
	// ServeName the service's own pods.
	LabelName  = "app.kubernetes.io/name"
	RunnerName = "sandbox-runner"
	ServeName  = "sandbox"

	// LabelKind tells snippet pods from other kinds of sandbox pod.
	LabelKind   = "sandbox.dev/kind"
	KindSnippet = "snippet"

	// LabelOwner names the serve pod (or host) whose pool made the pod.
	LabelOwner = "sandbox.dev/owner"
	// LabelIncarnation names the serve process (one start of its container)
	// whose pool made the pod. A pool only ever hands out pods of its own
	// incarnation: its claims live in its memory, so a restarted container
	// cannot know which of its predecessor's pods already ran a job.
	LabelIncarnation = "sandbox.dev/incarnation"
	// AnnotationClaimedBy records, after the job reached the pod's runner,
	// that the pod was handed out and by whom; the claim itself is decided
	// in serve's memory. A pod carrying it is never handed out again. It is
	// an annotation, not a label, because no policy selects on it and a
	// label change makes the node's NetworkPolicy engine re-evaluate the pod
	// (kube-router rewrites the node's rules in full, Cilium gives the pod a
	// new identity): once per execution, for nothing.
	AnnotationClaimedBy = "sandbox.dev/claimed-by"
	// AnnotationClaimedAt records when the claim happened, for operators.
	AnnotationClaimedAt = "sandbox.dev/claimed-at"

	// RunnerContainer is the sandbox pod's only container.
	RunnerContainer = "runner"
	// RunnerPortName names the runner's port in the pod and the policies.
	RunnerPortName = "runner"
	// DefaultRunnerPort is where `sandbox run` listens in the pod.
	DefaultRunnerPort = 8080
)

// RunnerSelector selects every snippet pod in a namespace, whoever owns it.
func RunnerSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelName: RunnerName, LabelKind: KindSnippet})
}

// OwnerSelector selects the snippet pods of one owner, whatever incarnation
// made them.
func OwnerSelector(owner string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelName: RunnerName, LabelKind: KindSnippet, LabelOwner: LabelValue(owner)})
}

// PoolSelector selects the snippet pods one pool may hand out: its owner's,
// made by its incarnation.
func PoolSelector(o Owner) labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelName: RunnerName, LabelKind: KindSnippet,
		LabelOwner: LabelValue(o.Name), LabelIncarnation: LabelValue(o.Incarnation)})
}

var labelValueRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// LabelValue turns s into a valid label value (at most 63 characters of a
// restricted alphabet). Valid values pass unchanged, so pod names -- the usual
// owners -- stay readable; anything else becomes a stable hash.
func LabelValue(s string) string {
	if len(s) <= 63 && labelValueRE.MatchString(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	clean := strings.Trim(regexp.MustCompile(`[^-A-Za-z0-9_.]+`).ReplaceAllString(s, "-"), "-_.")
	if len(clean) > 40 {
		clean = clean[:40]
	}
	clean = strings.Trim(clean, "-_.")
	h := hex.EncodeToString(sum[:])[:16]
	if clean == "" {
		return "h-" + h
	}
	return clean + "-" + h
}
