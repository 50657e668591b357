package verify

import apierrors "k8s.io/apimachinery/pkg/api/errors"

func ptrTo[T any](v T) *T { return &v }

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
