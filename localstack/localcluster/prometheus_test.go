package localcluster

import (
	"strconv"
	"strings"
	"testing"
)

// The local Prometheus's address is known before it first starts and the
// same on every later call, kept in the cluster's state: the RunnerClass the
// program declares names it (KEDA's serverAddress), and the program runs
// before Prometheus starts and again on every fleet up.
func TestThePrometheusAddressIsPickedOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	if err := writeState(dir, &State{Name: "t", Ports: Ports{APIServer: 1}}); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir}
	first, err := c.PrometheusAddress()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first, "http://127.0.0.1:") {
		t.Fatalf("PrometheusAddress = %q, want http://127.0.0.1:<port>", first)
	}
	again, err := (&Cluster{Dir: dir}).PrometheusAddress()
	if err != nil || again != first {
		t.Errorf("a later call: %q (%v), want the same %q", again, err, first)
	}
	st, err := ReadState(dir)
	if err != nil || st == nil || len(st.ExtraPorts[Prometheus]) != 1 || !strings.HasSuffix(first, ":"+strconv.Itoa(st.ExtraPorts[Prometheus][0])) {
		t.Errorf("the state's Prometheus port %v (%v), want the one in %q", st, err, first)
	}
}
