package controller

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// Steps built alone, with only their own dependencies, for tests that read
// one step by itself (stepalone_test.go): no manager, no other step.

// RunClassStep runs the class step on rs with nothing but reader.
func RunClassStep(ctx context.Context, reader client.Reader, rs *v1alpha1.RunnerSet) (done bool, requeue time.Duration, err error) {
	return classStep{Client: reader}.run(ctx, &state{rs: rs})
}

// RunTokenStep runs the token step on rs with nothing but tokens and the
// clock now, as if the class step had resolved rs's settings without a class.
func RunTokenStep(ctx context.Context, tokens TokenSource, now func() time.Time, rs *v1alpha1.RunnerSet) (done bool, requeue time.Duration, err error) {
	return tokenStep{Tokens: tokens, now: now}.run(ctx, &state{rs: rs, settings: v1alpha1.Effective(rs, nil)})
}
