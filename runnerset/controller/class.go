package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/policy"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// classStep accepts the RunnerSet's RunnerClass, or says why not: the class
// is missing, its policy refuses the RunnerSet, gitlab-runner would not
// understand the job settings, or the class's job nodes cannot keep a job
// as long as the job timeout. It only reads the class.
type classStep struct {
	Client client.Reader
}

func (r classStep) run(ctx context.Context, s *state) (bool, time.Duration, error) {
	class := &v1alpha1.RunnerClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: s.rs.Spec.ClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			s.rs.SetCondition(v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, v1alpha1.ReasonRunnerClassNotFound, fmt.Sprintf(
				"RunnerClass %q named by spec.className does not exist: pick one of `kubectl get runnerclasses`", s.rs.Spec.ClassName))
			return false, 0, nil // the RunnerClass watch brings us back
		}
		return false, 0, fmt.Errorf("getting RunnerClass %s: %w", s.rs.Spec.ClassName, err)
	}
	if v := policy.Check(s.rs, class); v != nil {
		s.rs.SetCondition(v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, v.Reason, v.Message)
		return false, 0, nil
	}
	// Job settings gitlab-runner would not understand stop the pass here,
	// before anything of the spec is written: the managers keep running
	// on their last good config.
	if v := runnerconfig.CheckJobSettings(s.rs, class); v != nil {
		s.rs.SetCondition(v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, v.Reason, v.Message)
		return false, 0, nil
	}
	// So does a job timeout the class's job nodes cannot keep a job for:
	// nothing is sent to GitLab, no capacity or manager changes.
	settings := v1alpha1.Effective(s.rs, class)
	var tooLong *v1alpha1.Failure
	if err := capacity.CheckJobTimeout(class, settings); errors.As(err, &tooLong) {
		s.rs.SetCondition(v1alpha1.ConditionClassAccepted, metav1.ConditionFalse, tooLong.Reason, tooLong.Message)
		return false, 0, nil
	}
	s.class = class
	s.settings = settings
	s.rs.SetCondition(v1alpha1.ConditionClassAccepted, metav1.ConditionTrue, v1alpha1.ReasonReconciled,
		fmt.Sprintf("RunnerClass %s allows this runner", class.Name))
	return true, 0, nil
}
