// Package policy says what each caller may do: run snippets, call which tool
// images, with how many requests in flight, at what rate and for how long.
// The policy is the YAML of a ConfigMap, read again whenever it changes.
package policy

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/egress"
)

// Where the policy lives, and its defaults.
const (
	// ConfigMap is the name of the ConfigMap holding the policy, in serve's
	// namespace, and Key its data key.
	ConfigMap = "sandbox-policy"
	Key       = "policy.yaml"
	// Defaults of a caller entry that leaves a bound out.
	DefaultMaxInFlight       = 3
	DefaultRequestsPerMinute = 120
	// AllToolImages, as a caller's tool image, grants every image serve's
	// --tool-images allows.
	AllToolImages = "*"
)

// Caller is one entry of the policy: a subject and what it may do.
type Caller struct {
	// Subject is a ServiceAccount (system:serviceaccount:NS:NAME) or a group
	// (system:serviceaccounts:NS, every ServiceAccount of NS).
	Subject string `json:"subject"`
	// Snippets lets the subject run code (POST /v1/execute).
	Snippets bool `json:"snippets"`
	// ToolImages are the images it may call (POST /v1/call), in the syntax
	// of serve's --tool-images and within it, one entry each; AllToolImages
	// for all of it. IMAGE=EGRESS narrows the image's egress for this
	// caller (none, or names the deployment's allow too), never widens it.
	ToolImages []string `json:"toolImages"`
	// MaxInFlight bounds its requests being served at once, and
	// RequestsPerMinute their rate, in bursts of up to six seconds' worth
	// (at least MaxInFlight); both are shared by every caller the entry
	// names.
	MaxInFlight       int `json:"maxInFlight"`
	RequestsPerMinute int `json:"requestsPerMinute"`
	// MaxTimeoutS bounds the timeout_s it may ask for; 0 means the API's.
	MaxTimeoutS int `json:"maxTimeoutS"`
}

// Policy is the parsed policy.
type Policy struct {
	Callers []Caller `json:"callers"`
}

// Parse reads a policy and checks it against the deployment's tool images
// (deployed): every entry names a subject once, its bounds are sane and
// its images are ones the deployment allows.
func Parse(data []byte, deployed api.CallPolicy) (*Policy, error) {
	var p Policy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	seen := map[string]bool{}
	var errs []error
	for i := range p.Callers {
		c := &p.Callers[i]
		if err := c.check(deployed); err != nil {
			errs = append(errs, fmt.Errorf("policy: caller %d (%q): %w", i+1, c.Subject, err))
		}
		if seen[c.Subject] {
			errs = append(errs, fmt.Errorf("policy: subject %q is named twice", c.Subject))
		}
		seen[c.Subject] = true
	}
	return &p, errors.Join(errs...)
}

// check validates c and fills in its defaults.
func (c *Caller) check(deployed api.CallPolicy) error {
	if !strings.HasPrefix(c.Subject, "system:serviceaccount:") && !strings.HasPrefix(c.Subject, "system:serviceaccounts") {
		return errors.New("subject: name a ServiceAccount (system:serviceaccount:NS:NAME) or a namespace's (system:serviceaccounts:NS)")
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.RequestsPerMinute == 0 {
		c.RequestsPerMinute = DefaultRequestsPerMinute
	}
	if c.MaxTimeoutS == 0 {
		c.MaxTimeoutS = api.MaxTimeoutS
	}
	switch {
	case c.MaxInFlight < 0 || c.RequestsPerMinute < 0:
		return errors.New("maxInFlight and requestsPerMinute must be positive")
	case c.MaxTimeoutS < 0 || c.MaxTimeoutS > api.MaxTimeoutS:
		return fmt.Errorf("maxTimeoutS must be between 1 and %d", api.MaxTimeoutS)
	}
	ims, err := c.images()
	if err != nil {
		return err
	}
	for _, im := range ims {
		img := im.Pattern
		if err := api.ValidateImagePatterns([]string{img}); err != nil {
			return err
		}
		if !within(img, deployed) {
			return fmt.Errorf("tool image %q is not within the deployment's allow list (%s)", img, deployed.ImagesSetting)
		}
		if im.Given && deployed.EgressOf != nil {
			outer, err := egress.Parse(deployed.EgressOf(img))
			if err == nil && !im.Egress.Within(outer) {
				return fmt.Errorf("tool image %q: egress %s is wider than the deployment's (%s): a caller's egress may only narrow it", img, im.Egress, outer)
			}
		}
	}
	return nil
}

// images are c's tool images but AllToolImages, with their egress; each
// entry is one image.
func (c Caller) images() (egress.Images, error) {
	var list []string
	for _, img := range c.ToolImages {
		if img == AllToolImages {
			continue
		}
		if strings.Contains(img, ";") {
			return nil, fmt.Errorf("tool image %q: one image per entry", img)
		}
		list = append(list, img)
	}
	ims, err := egress.ParseImages(list)
	if err != nil {
		return nil, fmt.Errorf("tool images: %w", err)
	}
	return ims, nil
}

// patterns are c's tool images without their egress.
func (c Caller) patterns() []string {
	ims, err := c.images()
	if err != nil {
		return nil
	}
	return ims.Patterns()
}

// EgressFor is c's egress for image (package egress's syntax), "" when its
// entry gives none: the deployment's applies.
func (c Caller) EgressFor(image string) string {
	ims, err := c.images()
	if err != nil {
		return ""
	}
	// Its exact entry, else the longest prefix entry that holds it.
	if e, ok := ims.For(image, egress.Egress{}); ok && e.Mode != "" {
		return e.String()
	}
	return ""
}

// within reports whether every image the pattern img matches is on the
// deployment's allow list.
func within(img string, deployed api.CallPolicy) bool {
	prefix, isPrefix := strings.CutSuffix(img, "*")
	if !isPrefix && !strings.HasSuffix(img, "/") {
		return deployed.ImageAllowed(img)
	}
	if !isPrefix {
		prefix = img
	}
	for _, e := range deployed.Images {
		if p, ok := strings.CutSuffix(e, "*"); ok || strings.HasSuffix(e, "/") {
			if strings.HasPrefix(prefix, p) {
				return true
			}
		}
	}
	return false
}

// burst is how many requests c may send at once within its rate.
func (c Caller) burst() int {
	return max(c.MaxInFlight, c.RequestsPerMinute/10)
}

// For is the entry that names id: the one naming its user, else the first
// naming one of its groups.
func (p *Policy) For(id auth.Identity) (Caller, bool) {
	if i := slices.IndexFunc(p.Callers, func(c Caller) bool { return c.Subject == id.User }); i >= 0 {
		return p.Callers[i], true
	}
	i := slices.IndexFunc(p.Callers, func(c Caller) bool { return slices.Contains(id.Groups, c.Subject) })
	if i < 0 {
		return Caller{}, false
	}
	return p.Callers[i], true
}

// Kind is what a request asks for.
type Kind int

// The kinds of request the policy judges.
const (
	Snippet Kind = iota
	ToolCall
)

// Allows refuses with a 403 what c does not grant: the kind of request, an
// image ("" before the body is read); and with a 400 a timeout over its
// bound (0 before it is read).
func (c Caller) Allows(id auth.Identity, k Kind, image string, timeout time.Duration) error {
	who := id.User
	switch {
	case k == Snippet && !c.Snippets:
		return api.Errorf(http.StatusForbidden, "%s may not run snippets here", who)
	case k == ToolCall && len(c.ToolImages) == 0:
		return api.Errorf(http.StatusForbidden, "%s may not call tools here", who)
	case k == ToolCall && image != "" && !slices.Contains(c.ToolImages, AllToolImages) &&
		!(api.CallPolicy{Images: c.patterns()}).ImageAllowed(image):
		return api.Errorf(http.StatusForbidden, "%s may not call the tool image %q", who, image)
	case timeout > time.Duration(c.MaxTimeoutS)*time.Second:
		// A 400, not a 403: the model that chose the timeout can fix it.
		return api.Errorf(http.StatusBadRequest, "%s may ask for timeout_s of %d at most", who, c.MaxTimeoutS)
	}
	return nil
}
