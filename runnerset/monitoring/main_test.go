package monitoring_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run starts a kube-apiserver with the Prometheus operator's CRDs, from its
// module, at the version of the types go.mod requires.
func run(m *testing.M) int {
	crds, err := testenv.PrometheusOperatorCRDs(context.Background(), "servicemonitors", "podmonitors", "prometheusrules")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err = testenv.Start(testenv.WithCRDs(crds...))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	return m.Run()
}
