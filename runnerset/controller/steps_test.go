package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

func TestStepsRunInTheOrderOfTheDependentConditions(t *testing.T) {
	r := New(nil, nil, nil)
	var got []string
	for _, st := range r.steps {
		got = append(got, st.condition)
	}
	if !slices.Equal(got, v1alpha1.DependentConditions) {
		t.Errorf("steps run %v, conditions roll up as %v", got, v1alpha1.DependentConditions)
	}
}

func TestAConditionWithoutAStepIsRefused(t *testing.T) {
	nop := func(context.Context, *state) (bool, time.Duration, error) { return true, 0, nil }
	all := map[string]stepFunc{}
	for _, c := range v1alpha1.DependentConditions {
		all[c] = nop
	}
	if got := len(steps(all)); got != len(v1alpha1.DependentConditions) {
		t.Fatalf("%d steps", got)
	}
	for _, missing := range []string{v1alpha1.ConditionCapacityReady, ""} {
		byCondition := map[string]stepFunc{}
		for c, f := range all {
			if c != missing {
				byCondition[c] = f
			}
		}
		if missing == "" {
			byCondition["Unknown"] = nop
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("steps without %q did not panic", missing)
				}
			}()
			steps(byCondition)
		}()
	}
}
