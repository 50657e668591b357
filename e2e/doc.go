// Package e2e is the end-to-end suite. It runs only with the build tag e2e
// (`make e2e`): TestMain builds the offline images, creates a fresh kind
// cluster through package kindenv, deploys `sandbox manifests` and deletes
// the cluster at the end. Each test is an e2e-framework feature.
package e2e
