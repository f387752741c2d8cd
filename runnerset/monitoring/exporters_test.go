package monitoring_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	nodepoolmetrics "sigs.k8s.io/karpenter/pkg/controllers/metrics/nodepool"
	"time"

	"github.com/runnerfleet/runnerfleet/internal/gomod"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

// A series as an exporter produces it: its name and every label.
type series struct {
	name   string
	labels map[string]string
}

func (s series) String() string {
	keys := make([]string, 0, len(s.labels))
	for k := range s.labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+`="`+s.labels[k]+`"`)
	}
	return s.name + "{" + strings.Join(parts, ",") + "}"
}

func (s series) with(extra map[string]string) series {
	l := map[string]string{}
	for k, v := range s.labels {
		l[k] = v
	}
	for k, v := range extra {
		l[k] = v
	}
	return series{s.name, l}
}

// gathered turns what a registry gathers into series.
func gathered(t *testing.T, g prometheus.Gatherer) map[string][]series {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]series{}
	for _, f := range fams {
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			name := f.GetName()
			if f.GetType() == dto.MetricType_HISTOGRAM {
				out[name+"_bucket"] = append(out[name+"_bucket"], series{name + "_bucket", l})
				continue
			}
			out[name] = append(out[name], series{name, l})
		}
	}
	return out
}

// controllerSeries are the series the controller's Collector and counters
// export for one not-Ready RunnerSet with a token expiry and a draining
// manager: the very label sets a scrape of the controller has.
func controllerSeries(t *testing.T) map[string][]series {
	t.Helper()
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}, Spec: v1alpha1.RunnerSetSpec{ClassName: "eks-spot"}}
	rs.SetCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonRollingOut, "x")
	now := metav1.Now()
	pod := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build-manager-1", DeletionTimestamp: &now, Finalizers: []string{"x"},
			Labels: map[string]string{resources.LabelManagedBy: resources.ManagedBy, resources.LabelComponent: resources.ComponentManager, resources.LabelRunnerSet: "build"}},
	}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(rs, pod).Build()
	exp := &metrics.Expiries{}
	exp.Set(types.NamespacedName{Namespace: "team-a", Name: "build"}, time.Now())
	reg := prometheus.NewRegistry()
	reg.MustRegister(&metrics.Collector{Reader: c, Mapper: c.RESTMapper(), CapacityKinds: nil, Expiries: exp})
	reg.MustRegister(metrics.Counters()...)
	metrics.JobsInterrupted.WithLabelValues("team-a", "build", "DeletionByPodGC")
	metrics.JobRetries.WithLabelValues("team-a", "build", metrics.ResultRetried)
	out := gathered(t, reg)
	for _, n := range []string{metrics.RunnerSetReady, metrics.TokenExpiry, metrics.DrainDeadline, metrics.ReconcileErrorsTotal, metrics.JobsInterruptedTotal, metrics.JobRetriesTotal} {
		if len(out[n]) == 0 {
			t.Fatalf("the controller exports no %s", n)
		}
	}
	_ = corev1.Pod{}
	_ = controller.CapacityKinds
	return out
}

// karpenterSeries are the NodePool series Karpenter's own metrics code
// exports, set through it.
func karpenterSeries(t *testing.T) map[string][]series {
	t.Helper()
	nodepoolmetrics.Limit.Set(100, map[string]string{"nodepool": "rf-x", "resource_type": "cpu"})
	nodepoolmetrics.Usage.Set(10, map[string]string{"nodepool": "rf-x", "resource_type": "cpu"})
	return gathered(t, ctrlmetrics.Registry)
}

var (
	runnerOnce    sync.Once
	runnerMetrics map[string][]string
	runnerErr     error
)

// runnerMetricNames are the metrics gitlab-runner's source defines, with
// their variable labels, read from the module the config oracle pins:
// every `Name: "gitlab_runner_…"` and the label list that follows it.
func runnerMetricNames(t *testing.T) map[string][]string {
	t.Helper()
	runnerOnce.Do(func() {
		dir, err := gomod.Download(context.Background(), oracle.GitLabRunnerModule, oracle.GitLabRunnerVersion)
		if err != nil {
			runnerErr = err
			return
		}
		def := regexp.MustCompile(`(?s)(?:Name:\s*|NewDesc\(\s*)"(gitlab_runner_[a-z_]+)".{0,600}?\[\]string\{([^}]*)\}`)
		name := regexp.MustCompile(`"(gitlab_runner_[a-z_]+)"`)
		runnerMetrics = map[string][]string{}
		runnerErr = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range name.FindAllStringSubmatch(string(b), -1) {
				if _, ok := runnerMetrics[m[1]]; !ok {
					runnerMetrics[m[1]] = nil
				}
			}
			for _, m := range def.FindAllStringSubmatch(string(b), -1) {
				var labels []string
				for _, l := range strings.Split(m[2], ",") {
					if l = strings.Trim(strings.TrimSpace(l), `"`); l != "" {
						labels = append(labels, l)
					}
				}
				if runnerMetrics[m[1]] == nil {
					runnerMetrics[m[1]] = labels
				}
			}
			return nil
		})
	})
	if runnerErr != nil {
		t.Fatal(runnerErr)
	}
	return runnerMetrics
}

// runnerSeries is a gitlab-runner series as a manager's scrape has it: its
// own labels (from its source) plus the scrape's target labels.
func runnerSeries(t *testing.T, name string, values map[string]string) series {
	t.Helper()
	base := strings.TrimSuffix(name, "_bucket")
	labels, ok := runnerMetricNames(t)[base]
	if !ok {
		t.Fatalf("gitlab-runner %s defines no metric %s", oracle.GitLabRunnerVersion, base)
	}
	l := map[string]string{"job": monitoring.ManagersName, "instance": "10.0.0.7:9252", "namespace": "team-a", "pod": "build-manager-1", monitoring.LabelRunnerSet: "build"}
	for _, k := range labels {
		l[k] = "x"
		if v, ok := values[k]; ok {
			l[k] = v
		}
	}
	if v, ok := values["le"]; ok {
		l["le"] = v
	}
	return series{name, l}
}

// exported reports whether name is a metric one of the exporters produces
// (for a histogram, its _bucket, _sum or _count).
func exported(t *testing.T, name string) bool {
	t.Helper()
	base := name
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base = strings.TrimSuffix(base, suf)
	}
	if _, ok := runnerMetricNames(t)[base]; ok {
		return true
	}
	for _, s := range [][]string{{metrics.RunnerSets, metrics.RunnerSetReady, metrics.TokenExpiry, metrics.DrainingManagerPods, metrics.DrainDeadline,
		metrics.RunnerSetsDeleting, metrics.CapacityObjects, metrics.ReconcileErrorsTotal, metrics.GitLabRequestsTotal, metrics.GitLabRequestDuration, metrics.JobsInterruptedTotal, metrics.JobRetriesTotal, metrics.RunnerSetNodes}} {
		for _, n := range s {
			if n == base || n == name {
				return true
			}
		}
	}
	k := karpenterSeries(t)
	if _, ok := k[name]; ok {
		return true
	}
	return false
}
