package kube

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// setPath reaches into objects and into the elements a list already has;
// an element the list lacks, or a value that is no object, is an error
// naming the path.
func TestSetPathReachesIntoObjectsAndExistingListElements(t *testing.T) {
	m := map[string]any{"metadata": map[string]any{"ownerReferences": []any{map[string]any{"name": "a", "uid": ""}}}}
	uid := pulumi.String("u-1")
	if err := setPath(m, strings.Split("metadata.ownerReferences.0.uid", "."), uid); err != nil {
		t.Fatal(err)
	}
	if got := m["metadata"].(map[string]any)["ownerReferences"].([]any)[0].(map[string]any)["uid"]; got != uid {
		t.Errorf("uid %v", got)
	}
	if err := setPath(m, strings.Split("spec.selector.app", "."), pulumi.String("x")); err != nil || m["spec"].(map[string]any)["selector"].(map[string]any)["app"] != pulumi.String("x") {
		t.Errorf("a new object path: %v %v", err, m["spec"])
	}
	for path, want := range map[string]string{
		"metadata.ownerReferences.1.uid":    "metadata.ownerReferences: no element 1 in a list of 1",
		"metadata.ownerReferences.x":        "metadata.ownerReferences: no element x in a list of 1",
		"metadata.ownerReferences.0.name.y": "metadata.ownerReferences.0.name is not an object",
	} {
		if err := setPath(m, strings.Split(path, "."), uid); err == nil || err.Error() != want {
			t.Errorf("%s: error %v, want %q", path, err, want)
		}
	}
}
