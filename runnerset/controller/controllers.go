// The controllers of runnerset-controller, listed in one place as
// Karpenter's controllers.go lists its own: cmd/runnerset-controller
// registers each of them with Register, after the field indexes they
// share. No controller registers another.

package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Controller is one controller of runnerset-controller.
type Controller interface {
	// Name is its name in logs, metrics and events.
	Name() string
	// Register adds it and its watches to mgr.
	Register(ctx context.Context, mgr ctrl.Manager) error
}

var (
	_ Controller = (*Reconciler)(nil)
	_ Controller = (*ClassReconciler)(nil)
	_ Controller = interruptionsController{}
)

// NewControllers returns every controller of runnerset-controller: the
// RunnerSet controller (New with opts), the RunnerClass controller and the
// leader's watch of job pods taken away under their jobs (interruptions.go).
// They read the field indexes Register adds to the manager.
func NewControllers(c client.Client, apiReader client.Reader, rec events.EventRecorder, opts ...Option) []Controller {
	r := New(c, apiReader, rec, opts...)
	return []Controller{
		r,
		&ClassReconciler{Client: c},
		interruptionsController{recorder: rec, retry: r.jobRetry, now: r.Now},
	}
}

// interruptionsController registers the watch of interrupted job pods and
// the retries of their jobs (jobretry.go).
type interruptionsController struct {
	recorder events.EventRecorder
	retry    JobRetryOptions
	now      func() time.Time
}

func (interruptionsController) Name() string { return "jobinterruptions" }

func (c interruptionsController) Register(_ context.Context, mgr ctrl.Manager) error {
	return watchInterruptions(mgr, c.recorder, c.retry, c.now)
}

// Register adds to mgr the field indexes the controllers share, then each
// of cs.
func Register(ctx context.Context, mgr ctrl.Manager, cs ...Controller) error {
	if err := indexFields(ctx, mgr); err != nil {
		return fmt.Errorf("indexing RunnerSets: %w", err)
	}
	for _, c := range cs {
		if err := c.Register(ctx, mgr); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", c.Name(), err)
		}
	}
	return nil
}
