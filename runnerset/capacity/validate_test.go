package capacity

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
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
	np := NodePool(rs(), eks(), karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "rfclass-eks"})
	np.Name = "validate-memo-test"

	judge := func(what string, wantErrs bool) {
		t.Helper()
		before := validations.Load()
		errs, err := Validate(np, scheme)
		if err != nil {
			t.Fatal(err)
		}
		if (len(errs) > 0) != wantErrs {
			t.Fatalf("%s: errors %v, want errors: %v", what, errs, wantErrs)
		}
		t.Logf("%s: judged by the CRD %d time(s), %d error(s)", what, validations.Load()-before, len(errs))
	}
	runs := func() int64 { return validations.Load() }

	start := runs()
	judge("first", false)
	judge("same object again", false)
	if got := runs() - start; got != 1 {
		t.Errorf("the same valid NodePool was judged %d times, want once", got)
	}

	// The same name with a weight the CRD refuses (at most 100).
	np.Spec.Weight = ptr.To[int32](1000)
	start = runs()
	judge("changed to invalid", true)
	judge("invalid again", true)
	if got := runs() - start; got != 2 {
		t.Errorf("an invalid NodePool was judged %d times in two calls, want 2", got)
	}

	np.Spec.Weight = ptr.To[int32](10)
	start = runs()
	judge("changed to another valid weight", false)
	if got := runs() - start; got != 1 {
		t.Errorf("a changed NodePool was judged %d times, want once", got)
	}
}
