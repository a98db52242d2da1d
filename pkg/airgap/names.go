package airgap

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// NormalizeName returns an image name the way CRI looks images up:
// "busybox" is docker.io/library/busybox:latest, "example.com/x" is
// example.com/x:latest; a name with a digest keeps it.
func NormalizeName(name string) (string, error) {
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", name, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

// imageName is the normalized name index.json gives a manifest, "" when it
// gives none.
func imageName(annotations map[string]string) (string, error) {
	if name := annotations[annotationContainerName]; name != "" {
		return NormalizeName(name)
	}
	ref := annotations[annotationRefName]
	if ref == "" {
		return "", nil
	}
	// An OCI ref.name may be a whole name or only a tag ("latest").
	if !strings.ContainsAny(ref, "/:@") {
		return "", fmt.Errorf("%s is only the tag %q, which names no image: give the manifest an %s annotation with the full name "+
			"(or export it with ctr images export, docker save, or skopeo with a full name)", annotationRefName, ref, annotationContainerName)
	}
	return NormalizeName(ref)
}
