package capacity

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// A capacity object found valid is not judged again while it is the same
// object, and any change to it, however small, is judged again: the memo
// is keyed by the whole object, not its name. Invalid objects are judged
// every time.
func TestValidateJudgesAnObjectOnceAndAnyChangeAgain(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	np := NodePool(rs(), eks(), karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "rfclass-eks"}, v1alpha1.Effective(rs(), eks()))
	np.Name = "validate-memo-test"

	for _, c := range []struct {
		what     string
		weight   *int32 // set on the NodePool before this call
		wantErrs bool
		judged   int64 // times the CRD's rules ran in this call
	}{
		{"first", nil, false, 1},
		{"same object again", nil, false, 0},
		{"same name, a weight the CRD refuses (at most 100)", ptr.To[int32](1000), true, 1},
		{"invalid again", ptr.To[int32](1000), true, 1},
		{"changed to another valid weight", ptr.To[int32](10), false, 1},
	} {
		np.Spec.Weight = c.weight
		before := validations.Load()
		errs, err := Validate(np, scheme)
		if err != nil {
			t.Fatal(err)
		}
		if (len(errs) > 0) != c.wantErrs {
			t.Errorf("%s: errors %v, want errors: %v", c.what, errs, c.wantErrs)
		}
		if got := validations.Load() - before; got != c.judged {
			t.Errorf("%s: the CRD's rules ran %d times, want %d", c.what, got, c.judged)
		}
	}
}
