package verify

import (
	"context"
	"fmt"
	"strings"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// access is one question to the authorizer about serve's service account.
type access struct {
	verb, group, resource, sub, ns string
}

func (a access) String() string {
	r := a.resource
	if a.sub != "" {
		r += "/" + a.sub
	}
	if a.group != "" {
		r += "." + a.group
	}
	where := "cluster-wide"
	if a.ns != "" {
		where = "in " + a.ns
	}
	return fmt.Sprintf("%s %s %s", a.verb, r, where)
}

// rbacQuestions: what the service must not do, and what it needs (the
// positive control: if the needed rights read as denied, the review is not
// looking at the right subject).
func rbacQuestions(ns string) (denied, allowed []access) {
	denied = []access{
		{"create", "", "pods", "exec", ns},
		{"get", "", "pods", "exec", ns},
		{"create", "", "pods", "attach", ns},
		{"create", "", "pods", "portforward", ns},
		{"get", "", "secrets", "", ns},
		{"list", "", "secrets", "", ns},
		{"get", "", "secrets", "", "kube-system"},
		{"list", "", "secrets", "", ""},
		{"create", "", "pods", "exec", "kube-system"},
		{"create", "", "serviceaccounts", "token", ns},
		{"create", "rbac.authorization.k8s.io", "rolebindings", "", ns},
		{"escalate", "rbac.authorization.k8s.io", "roles", "", ns},
		{"impersonate", "", "users", "", ""},
		{"create", "", "pods", "", "kube-system"},
		{"update", "", "pods", "ephemeralcontainers", ns},
		{"get", "", "nodes", "proxy", ""},
	}
	allowed = []access{
		{"create", "", "pods", "", ns},
		{"get", "", "pods", "", ns},
		{"list", "", "pods", "", ns},
		{"watch", "", "pods", "", ns},
		{"delete", "", "pods", "", ns},
		// Who a caller is (serve --auth kubernetes): a TokenReview each.
		{"create", "authentication.k8s.io", "tokenreviews", "", ""},
	}
	return denied, allowed
}

// checkRBAC asks the API server's authorizer, through SubjectAccessReview,
// what serve's service account may do: the same answer its requests get.
func checkRBAC(ctx context.Context, e *env) []Result {
	return []Result{reviewRBAC(ctx, e.cs, e.opts.Namespace, e.opts.ServiceAccount)}
}

func reviewRBAC(ctx context.Context, cs kubernetes.Interface, ns, sa string) Result {
	const name = "rbac/service-account-least-privilege"
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa)
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	ask := func(a access) (bool, string, error) {
		r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authv1.ResourceAttributes{Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, "", err
		}
		return r.Status.Allowed, r.Status.Reason, nil
	}
	denied, allowed := rbacQuestions(ns)
	var leaks, missing, errs, fine []string
	for _, a := range denied {
		ok, why, err := ask(a)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: %v", a, err))
		case ok:
			leaks = append(leaks, fmt.Sprintf("%s ALLOWED (%s)", a, why))
		default:
			fine = append(fine, "no "+a.String())
		}
	}
	for _, a := range allowed {
		ok, _, err := ask(a)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: %v", a, err))
		case !ok:
			missing = append(missing, a.String())
		default:
			fine = append(fine, "can "+a.String())
		}
	}
	ev := fmt.Sprintf("SubjectAccessReview for %s: %s", user, strings.Join(fine, ", "))
	switch {
	case len(leaks) > 0:
		return result(name, "", Fail, "%s; %s", strings.Join(leaks, ", "), ev)
	case len(errs) > 0:
		return result(name, "", Inconclusive, "reviews failed: %s; %s", strings.Join(errs, "; "), ev)
	case len(missing) > 0:
		return result(name, "", Inconclusive, "the positive control failed: the service account cannot %s, so this may not be the service's account; %s", strings.Join(missing, ", "), ev)
	}
	return result(name, "", Pass, "%s", ev)
}
