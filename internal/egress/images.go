package egress

import (
	"fmt"
	"strings"
)

// Image is one entry of serve's --tool-images: an image pattern (an exact
// reference, or a prefix ending in / or *) and its egress, if one is given.
type Image struct {
	Pattern string
	Egress  Egress
	Given   bool // false: the deployment's default egress applies
}

// Images is serve's tool image allow list with each image's egress.
type Images []Image

// ParseImages reads --tool-images. Each value holds entries separated by
// ";" (repeating the flag adds more): IMAGE, or IMAGE=EGRESS where EGRESS
// is what Parse reads ("none", "internet", or names separated by commas).
// An entry with no "=" may name several images separated by commas, the
// syntax from before egress by name. A pattern given twice is refused.
func ParseImages(values []string) (Images, error) {
	var out Images
	seen := map[string]bool{}
	add := func(im Image) error {
		if seen[im.Pattern] {
			return fmt.Errorf("image %q is listed twice: give each image one entry", im.Pattern)
		}
		seen[im.Pattern] = true
		out = append(out, im)
		return nil
	}
	for _, v := range values {
		for _, entry := range strings.Split(v, ";") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			img, spec, ok := strings.Cut(entry, "=")
			img = strings.TrimSpace(img)
			if !ok {
				for _, p := range strings.Split(entry, ",") {
					if p = strings.TrimSpace(p); p != "" {
						if err := add(Image{Pattern: p}); err != nil {
							return nil, err
						}
					}
				}
				continue
			}
			if strings.Contains(img, ",") {
				return nil, fmt.Errorf("entry %q: an image with an egress stands alone; separate entries with ';' (IMAGE=a.example,b.example;OTHER=none)", entry)
			}
			if img == "" {
				return nil, fmt.Errorf("entry %q: no image before '='", entry)
			}
			e, err := Parse(spec)
			if err != nil {
				return nil, fmt.Errorf("image %q: %w", img, err)
			}
			if err := add(Image{Pattern: img, Egress: e, Given: true}); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Patterns are the images alone, the allow list's patterns.
func (ims Images) Patterns() []string {
	out := make([]string, len(ims))
	for i, im := range ims {
		out[i] = im.Pattern
	}
	return out
}

// For is the egress of image: that of its exact entry, else of the longest
// prefix that holds it, else def (the deployment's default). ok is false
// when no entry matches (the allow list refuses such an image anyway).
func (ims Images) For(image string, def Egress) (e Egress, ok bool) {
	best := -1
	for i, im := range ims {
		p := im.Pattern
		switch {
		case p == image:
			return im.or(def), true
		case strings.HasSuffix(p, "*") && strings.HasPrefix(image, strings.TrimSuffix(p, "*")),
			strings.HasSuffix(p, "/") && strings.HasPrefix(image, p):
			if best < 0 || len(p) > len(ims[best].Pattern) {
				best = i
			}
		}
	}
	if best < 0 {
		return def, false
	}
	return ims[best].or(def), true
}

func (im Image) or(def Egress) Egress {
	if im.Given {
		return im.Egress
	}
	return def
}
