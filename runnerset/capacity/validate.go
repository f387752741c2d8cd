package capacity

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	awsapis "github.com/aws/karpenter-provider-aws/pkg/apis"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"

	"github.com/runnerfleet/runnerfleet/runnerset/crds"
	gkecrd "github.com/runnerfleet/runnerfleet/runnerset/crds/gke"
)

var (
	validatorsOnce sync.Once
	validators     map[schema.GroupKind]*crds.Validator
	validatorsErr  error
)

// Validate judges a capacity object as the API server would on create,
// with the CRD its owner ships (Karpenter's modules for NodePool,
// EC2NodeClass and KWOKNodeClass, GKE's schema for ComputeClass), without
// a request: a new tag's capacity is checked whole before any of it is
// written. A kind with no known CRD is not judged here.
func Validate(obj client.Object, scheme *runtime.Scheme) (field.ErrorList, error) {
	validatorsOnce.Do(func() {
		validators = map[schema.GroupKind]*crds.Validator{}
		all := append(slices.Clip(awsapis.CRDs), kwokapis.CRDs...)
		cc, err := gkecrd.ComputeClassCRD()
		if err != nil {
			validatorsErr = err
			return
		}
		all = append(all, cc)
		for _, crd := range all {
			v, err := crds.NewValidator(crd)
			if err != nil {
				validatorsErr = fmt.Errorf("CRD %s: %w", crd.Name, err)
				return
			}
			validators[schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}] = v
		}
	})
	if validatorsErr != nil {
		return nil, validatorsErr
	}
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, err
	}
	v, ok := validators[gvk.GroupKind()]
	if !ok {
		return nil, nil
	}
	typed := obj.DeepCopyObject()
	typed.GetObjectKind().SetGroupVersionKind(gvk)
	b, err := json.Marshal(typed)
	if err != nil {
		return nil, err
	}
	key := sha256.Sum256(b)
	if judged.valid(key) {
		return nil, nil
	}
	validations.Add(1)
	errs := v.Validate(typed)
	if len(errs) == 0 {
		judged.remember(key)
	}
	return errs, nil
}

// judged remembers the objects found valid, by a digest of all of them
// (kind, name, labels, spec): the schema and CEL rules judge the same
// object the same way every time, so a pass over a tag whose capacity has
// not changed, and each of a class's tags sharing its node class, need not
// run them again. They were 16% of the controller's CPU while a hundred new
// RunnerSets converged (BENCHMARKS.md). Objects found invalid are judged
// again each time.
var judged validMemo

// validations counts the objects judged by their CRD (the tests read it).
var validations atomic.Int64

// validMemoMax bounds judged: past it, it starts again empty.
const validMemoMax = 1 << 16

type validMemo struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]struct{}
}

func (v *validMemo) valid(key [sha256.Size]byte) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.m[key]
	return ok
}

func (v *validMemo) remember(key [sha256.Size]byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= validMemoMax {
		v.m = map[[sha256.Size]byte]struct{}{}
	}
	v.m[key] = struct{}{}
}
