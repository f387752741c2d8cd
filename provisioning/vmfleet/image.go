package vmfleet

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/provisioning/vmimage"
)

// ImageMismatchError is an image that is not the one the inputs name.
type ImageMismatchError struct {
	Given, Expected, Family string
	// Found is false when the family has no image of the expected name.
	Found bool
}

func (e *ImageMismatchError) Error() string {
	if e.Given == "" {
		return fmt.Sprintf("family %s has no image %s, the name its inputs give: build the image from these inputs (fleet image-name prints the name it must have), or give the inputs it was built from", e.Family, e.Expected)
	}
	if !e.Found {
		return fmt.Sprintf("image %s is not the image its inputs name (%s), and family %s has no image %s: build the image from these inputs, or give the inputs it was built from", e.Given, e.Expected, e.Family, e.Expected)
	}
	return fmt.Sprintf("image %s is not the image its inputs name: they name %s (family %s); boot that image, or give the inputs %s was built from", e.Given, e.Expected, e.Family, e.Given)
}

// matches reports whether ref (as CreateInstance takes an image: a GCE
// name or URL, an EC2 AMI ID) names img.
func matches(ref string, img providers.Image) bool {
	return ref == img.Name || ref == img.ID || strings.HasSuffix(ref, "/images/"+img.Name)
}

// ResolveImage finds the image the inputs name among the images of their
// family, and checks that ref, when given, is that image (by name, URL or
// the cloud's ID). It refuses an image of another name, and a family
// without the expected image.
func ResolveImage(ctx context.Context, c providers.Compute, ref string, in vmimage.Inputs) (providers.Image, error) {
	want, err := vmimage.Name(in)
	if err != nil {
		return providers.Image{}, err
	}
	imgs, err := c.ListImages(ctx, in.Family)
	if err != nil {
		return providers.Image{}, fmt.Errorf("listing the images of family %s: %w", in.Family, err)
	}
	i := slices.IndexFunc(imgs, func(img providers.Image) bool { return img.Name == want })
	if i < 0 && (ref == "" || matches(ref, providers.Image{Name: want})) {
		return providers.Image{}, &ImageMismatchError{Expected: want, Family: in.Family}
	}
	if ref != "" && (i < 0 || !matches(ref, imgs[i])) {
		return providers.Image{}, &ImageMismatchError{Given: ref, Expected: want, Family: in.Family, Found: i >= 0}
	}
	return imgs[i], nil
}
