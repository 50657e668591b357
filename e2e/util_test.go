//go:build e2e

package e2e

import "k8s.io/apimachinery/pkg/util/intstr"

func intstrPort(p int) intstr.IntOrString { return intstr.FromInt32(int32(p)) }
