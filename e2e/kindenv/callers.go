package kindenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/manifests"
	"github.com/sandboxd/sandbox/internal/policy"
)

// The suite's callers. serve admits a caller whose namespace carries
// manifests.ClientLabel (its ingress policy) and whom the caller policy names: the
// suite labels its client namespaces and grants each of them everything,
// with room for its loads.
const (
	// ClientNamespace holds the suite's client pods; its default
	// ServiceAccount is also who the test process calls serve as.
	ClientNamespace = "sandbox-e2e-clients"
	// AgentNamespace is where the sample agent runs, as a real agent would:
	// another namespace than the service's.
	AgentNamespace = "sandbox-e2e-agent"
	// BenchNamespace holds make bench-kind's client and its bare pods.
	BenchNamespace = "sandbox-bench"
	// tokenLife is the life of the test process's token: the whole suite.
	tokenLife = "4h"
)

// clientNamespaces are the namespaces the suite grants.
var clientNamespaces = []string{ClientNamespace, AgentNamespace, BenchNamespace}

// ClientLabels are the labels of a namespace whose pods call serve.
func ClientLabels() map[string]string { return map[string]string{manifests.ClientLabel: "true"} }

// applyCallers makes the client namespaces and grants them in the caller
// policy, beside what the shipped policy grants (verify's callers). Deploy
// calls it after each apply of the manifests, which puts the shipped
// policy back.
func applyCallers(ctx context.Context, k Kubectl) error {
	shipped, err := k.Run(ctx, nil, "-n", Namespace, "get", "configmap", policy.ConfigMap,
		"-o", `jsonpath={.data.policy\.yaml}`)
	if err != nil {
		return fmt.Errorf("read the shipped caller policy: %w", err)
	}
	doc, err := callersManifest(shipped)
	if err != nil {
		return err
	}
	if _, err := k.Run(ctx, doc, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("apply the suite's callers: %w", err)
	}
	return nil
}

// CallerToken mints the test process's token into a file under dir and
// names it in SANDBOX_TOKEN_FILE, where the Go client and sandbox exec
// read it.
func (e *Env) CallerToken(ctx context.Context, dir string) error {
	return e.Phase("caller token", func() error {
		tok, err := e.Token(ctx, ClientNamespace, "default", auth.DefaultAudience, tokenLife)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, "e2e-token")
		if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
			return err
		}
		return os.Setenv(client.TokenFileEnv, path)
	})
}

// Token mints a token of ServiceAccount ns/sa for audience, good for life
// (a duration kubectl takes, such as 10m). The ServiceAccount controller
// makes a namespace's default account a moment after the namespace:
// kubectl is asked again until it is there.
func (e *Env) Token(ctx context.Context, ns, sa, audience, life string) (string, error) {
	var lastErr error
	for range 30 {
		out, err := e.Kubectl.Run(ctx, nil, "-n", ns, "create", "token", sa, "--audience", audience, "--duration", life)
		if err == nil {
			return strings.TrimSpace(out), nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return "", fmt.Errorf("mint a token of %s/%s: %w", ns, sa, lastErr)
}

// callersManifest is the client namespaces and the caller policy: the
// shipped one's callers, and each client namespace's ServiceAccounts
// granted snippets and every tool image, far above what the suite sends.
func callersManifest(shipped string) ([]byte, error) {
	var p policy.Policy
	if err := yaml.UnmarshalStrict([]byte(shipped), &p); err != nil {
		return nil, fmt.Errorf("the shipped caller policy: %w", err)
	}
	var docs []string
	for _, ns := range clientNamespaces {
		p.Callers = append(p.Callers, policy.Caller{Subject: "system:serviceaccounts:" + ns, Snippets: true,
			ToolImages: []string{policy.AllToolImages}, MaxInFlight: 200, RequestsPerMinute: 60000})
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n    %s: \"true\"\n", ns, manifests.ClientLabel))
	}
	data, err := yaml.Marshal(p)
	if err != nil {
		return nil, err
	}
	cm, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": policy.ConfigMap, "namespace": Namespace},
		"data":     map[string]string{policy.Key: string(data)},
	})
	if err != nil {
		return nil, err
	}
	docs = append(docs, string(cm))
	return []byte(strings.Join(docs, "---\n")), nil
}

// TokenVolume is a projected ServiceAccount token for serve, and its mount
// where the clients read it by default: what a client pod needs to call.
func TokenVolume() (corev1.Volume, corev1.VolumeMount) {
	dir, file := filepath.Split(client.DefaultTokenFile)
	v := corev1.Volume{Name: "sandbox-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: auth.DefaultAudience, ExpirationSeconds: ptr.To[int64](3600), Path: file,
		}}},
	}}}
	return v, corev1.VolumeMount{Name: v.Name, MountPath: filepath.Clean(dir), ReadOnly: true}
}

// WithToken mounts TokenVolume in every container of pod and names the
// file in SANDBOX_TOKEN_FILE, for scripts that send it by hand: the pod
// has its ServiceAccount's token for serve (projected; the legacy
// automount stays off).
func WithToken(pod *corev1.Pod) *corev1.Pod {
	v, m := TokenVolume()
	pod.Spec.Volumes = append(pod.Spec.Volumes, v)
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		c.VolumeMounts = append(c.VolumeMounts, m)
		c.Env = append(c.Env, corev1.EnvVar{Name: client.TokenFileEnv, Value: client.DefaultTokenFile})
	}
	return pod
}
