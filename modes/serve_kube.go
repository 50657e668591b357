package modes

import (
	"errors"

	"github.com/sandboxd/sandbox/server"
)

// KubeFlags are serve's flags for the Kubernetes backend; ServeCmd embeds them.
type KubeFlags struct{}

// newKubeBackend builds the warm-pool backend. Placeholder until the pool lands.
func newKubeBackend(d *Deps, f *KubeFlags) (server.Backend, func(), error) {
	return nil, nil, errors.New("kubernetes backend: not implemented yet")
}
