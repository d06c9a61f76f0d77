package jobspec

import (
	"fmt"

	"github.com/distribution/reference"

	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// MaxPrefetchRefs bounds one PrefetchImages call.
const MaxPrefetchRefs = 64

// MaxImageRefLen bounds one image reference (Docker's own limit on a
// repository name is 255; a tag and a digest come on top).
const MaxImageRefLen = 512

// ValidateImageRefs checks a PrefetchImages call's refs: 1 to 64, each a
// parseable image reference, none twice.
func ValidateImageRefs(refs []string) error {
	switch {
	case len(refs) == 0:
		return apierr.Invalid("imageRefs", "must name at least one image")
	case len(refs) > MaxPrefetchRefs:
		return apierr.Invalid("imageRefs", "names %d images (at most %d)", len(refs), MaxPrefetchRefs)
	}
	seen := map[string]int{}
	for i, ref := range refs {
		f := fmt.Sprintf("imageRefs[%d]", i)
		if len(ref) > MaxImageRefLen {
			return apierr.Invalid(f, "is %d characters (at most %d)", len(ref), MaxImageRefLen)
		}
		if _, err := reference.ParseNormalizedNamed(ref); err != nil {
			return apierr.Invalid(f, "%s is not an image reference: %v", apierr.Quote(ref), err)
		}
		if j, dup := seen[ref]; dup {
			return apierr.Invalid(f, "%s is also imageRefs[%d]", apierr.Quote(ref), j)
		}
		seen[ref] = i
	}
	return nil
}
