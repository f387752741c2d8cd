package capacity

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/internal/schedtest"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// managersNode is a node of the on-demand managers' pool, as infra/aws,
// infra/gcp and the local cluster's real node label and taint it.
func managersNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "managers-1", Labels: resources.ManagerNodeLabels()},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{resources.ManagerNodeTaint()}},
	}
}

// jobNode is a node Karpenter launches for the NodePool: its template's
// labels and taints, spot.
func jobNode(np *karpv1.NodePool) *corev1.Node {
	labels := map[string]string{karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeSpot}
	for k, v := range np.Spec.Template.Labels {
		labels[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "job-1", Labels: labels},
		Spec:       corev1.NodeSpec{Taints: np.Spec.Template.Spec.Taints},
	}
}

// jobPodSpec is a job pod as gitlab-runner's kubernetes executor builds it
// from config.toml's node_selector and node_tolerations ("key=value" or
// "key" → effect).
func jobPodSpec(c *Capacity) corev1.PodSpec {
	spec := corev1.PodSpec{NodeSelector: c.Placement.NodeSelector}
	for kv, effect := range c.Placement.NodeTolerations {
		k, v, hasValue := strings.Cut(kv, "=")
		t := corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(effect)}
		if hasValue {
			t.Operator, t.Value = corev1.TolerationOpEqual, v
		}
		spec.Tolerations = append(spec.Tolerations, t)
	}
	return spec
}

func TestManagersLandOnlyOnTheOnDemandPoolAndJobsOnlyOnTheirSpotNodes(t *testing.T) {
	r := rs()
	c, err := build(r, eks())
	if err != nil {
		t.Fatal(err)
	}
	var np *karpv1.NodePool
	for _, o := range c.Objects {
		if p, ok := o.(*karpv1.NodePool); ok {
			np = p
		}
	}
	managers, job := managersNode(), jobNode(np)
	manager := resources.Deployment(r, "gitlab-runner:v19.4.0", "h", "team-a-build-j1").Spec.Template.Spec
	if err := schedtest.Fits(manager, managers); err != nil {
		t.Errorf("a manager pod does not fit the managers' pool: %v", err)
	}
	if err := schedtest.Fits(manager, job); err == nil {
		t.Error("a manager pod fits a spot job node: a preemption would kill its jobs")
	}
	jobs := jobPodSpec(c)
	if err := schedtest.Fits(jobs, job); err != nil {
		t.Errorf("a job pod does not fit its own node: %v", err)
	}
	if err := schedtest.Fits(jobs, managers); err == nil {
		t.Error("a job pod fits the on-demand managers' pool")
	}
	// Negative controls: without its toleration a manager pod is kept off
	// the tainted pool, and without its selector it could land elsewhere.
	bare := *manager.DeepCopy()
	bare.Tolerations = nil
	if err := schedtest.Fits(bare, managers); err == nil {
		t.Error("the managers' pool admits a pod without the toleration: it is not tainted")
	}
	anywhere := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	if err := schedtest.Fits(manager, anywhere); err == nil {
		t.Error("a manager pod fits an unlabelled node: it does not select the managers' pool")
	}
}
