package kube

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// inClusterNamespaceFile is where Kubernetes mounts the pod's namespace next
// to its service-account token.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Client-side rate limits. client-go defaults to 5 QPS / burst 10, which would
// cap the service near two executions a second (each costs a claim patch, a
// delete and a create) and add queueing delay to the claim itself.
const (
	clientQPS   = 100
	clientBurst = 200
)

// RESTConfig finds the cluster: the kubeconfig file when one is named, else
// the in-cluster service account, else the usual KUBECONFIG / ~/.kube/config.
func RESTConfig(kubeconfig, userAgent string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %q: %w", kubeconfig, err)
		}
	default:
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		}
		if err != nil {
			return nil, fmt.Errorf("find cluster config (in-cluster or kubeconfig): %w", err)
		}
	}
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	if userAgent != "" {
		cfg.UserAgent = userAgent
	}
	return cfg, nil
}

// NewClient returns a clientset for RESTConfig's cluster.
func NewClient(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	cfg, err := RESTConfig(kubeconfig, userAgent)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build kubernetes client: %w", err)
	}
	return cs, nil
}

// InClusterNamespace returns the namespace the current pod runs in, or ""
// outside a cluster.
func InClusterNamespace() string {
	b, err := os.ReadFile(inClusterNamespaceFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
