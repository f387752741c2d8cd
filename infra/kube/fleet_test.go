package kube

import (
	"testing"

	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// The stack's capacity.nodePools is the RunnerClass's spec.nodePools, a
// copy (the program's class never aliases the config); without it the
// class keeps the CRD's default (perTag).
func TestTheStacksNodePoolsModeIsTheClasss(t *testing.T) {
	f := &stackconfig.Fleet{ClusterName: "dev", Capacity: stackconfig.Capacity{
		NodePools: &v1alpha1.NodePoolSettings{Mode: v1alpha1.NodePoolModeAuto, SharedAbove: ptr.To[int32](7)},
	}}
	class := RunnerClass(f, &Cluster{})
	np := class.Spec.NodePools
	if np == nil || np.Mode != v1alpha1.NodePoolModeAuto || *np.SharedAbove != 7 {
		t.Fatalf("spec.nodePools %+v, want auto above 7", np)
	}
	if np == f.Capacity.NodePools {
		t.Error("the class's spec.nodePools is the stack config's own struct")
	}
	f.Capacity.NodePools = nil
	if np := RunnerClass(f, &Cluster{}).Spec.NodePools; np != nil {
		t.Errorf("without capacity.nodePools the class has spec.nodePools %+v", np)
	}
}
