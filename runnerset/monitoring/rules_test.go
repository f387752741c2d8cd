package monitoring_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

type inputSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type expAlert struct {
	ExpLabels      map[string]string `json:"exp_labels"`
	ExpAnnotations map[string]string `json:"exp_annotations"`
}

type alertCase struct {
	EvalTime  string     `json:"eval_time"`
	Alertname string     `json:"alertname"`
	ExpAlerts []expAlert `json:"exp_alerts"`
}

type ruleTest struct {
	Interval   string        `json:"interval"`
	InputSerie []inputSeries `json:"input_series"`
	AlertRules []alertCase   `json:"alert_rule_test"`
}

type ruleTests struct {
	RuleFiles          []string   `json:"rule_files"`
	EvaluationInterval string     `json:"evaluation_interval"`
	Tests              []ruleTest `json:"tests"`
}

// expect is the alert a rule of RuleGroups fires for labels: its own
// labels, and its annotations expanded as Prometheus would.
func expect(t *testing.T, alert string, labels map[string]string) expAlert {
	t.Helper()
	for _, g := range monitoring.RuleGroups() {
		for _, r := range g.Rules {
			if r.Alert != alert {
				continue
			}
			l := map[string]string{}
			for k, v := range labels {
				l[k] = v
			}
			for k, v := range r.Labels {
				l[k] = v
			}
			ann := map[string]string{}
			ref := regexp.MustCompile(`\{\{ \$labels\.([a-z_]+) \}\}`)
			for k, v := range r.Annotations {
				ann[k] = ref.ReplaceAllStringFunc(v, func(m string) string { return labels[ref.FindStringSubmatch(m)[1]] })
			}
			return expAlert{ExpLabels: l, ExpAnnotations: ann}
		}
	}
	t.Fatalf("no alert %s", alert)
	return expAlert{}
}

func pick(t *testing.T, all map[string][]series, name string) series {
	t.Helper()
	if len(all[name]) == 0 {
		t.Fatalf("no %s exported", name)
	}
	return all[name][0]
}

// Every alert fires on the series the exporters produce when it should,
// and stays silent on a healthy neighbour: promtool test rules, on the rule
// file as shipped.
func TestAlertRulesFireOnTheExportersSeries(t *testing.T) {
	ctl := controllerSeries(t)
	kp := karpenterSeries(t)
	team := map[string]string{"namespace": "team-a", "runnerset": "build"}
	ok := map[string]string{"namespace": "team-a", "runnerset": "fine"}
	ready := pick(t, ctl, metrics.RunnerSetReady)
	expiry := pick(t, ctl, metrics.TokenExpiry)
	drain := pick(t, ctl, metrics.DrainDeadline)
	var errs series
	for _, s := range ctl[metrics.ReconcileErrorsTotal] {
		if s.labels["step"] == v1alpha1.ConditionCapacityReady {
			errs = s
		}
	}
	interrupted := pick(t, ctl, metrics.JobsInterruptedTotal)
	refused := runnerSeries(t, monitoring.RunnerAPIRequests, map[string]string{"endpoint": monitoring.RunnerRequestJobEndpoint, "status": "403"})
	answered := runnerSeries(t, monitoring.RunnerAPIRequests, map[string]string{"endpoint": monitoring.RunnerRequestJobEndpoint, "status": "204"})
	usage := pick(t, kp, monitoring.KarpenterNodePoolUsage)
	limit := pick(t, kp, monitoring.KarpenterNodePoolLimit)
	bucket := func(rs, le string) series {
		return runnerSeries(t, monitoring.RunnerJobQueueDuration+"_bucket", map[string]string{"le": le}).with(map[string]string{"runnerset": rs})
	}

	in := []inputSeries{
		// Not Ready for 20 minutes; its neighbour Ready.
		{ready.with(team).String(), "0x30"},
		{ready.with(ok).String(), "1x30"},
		// Tokens expiring 6 days and 30 days after the test's epoch.
		{expiry.with(team).String(), fmt.Sprintf("%dx30", 6*24*3600)},
		{expiry.with(ok).String(), fmt.Sprintf("%dx30", 30*24*3600)},
		// A drain whose deadline was at 1m; another's is in a day.
		{drain.with(team).String(), "60x30"},
		{drain.with(ok).String(), "86400x30"},
		// One job a minute, each queued 5 to 15 minutes; the neighbour's under 5.
		{bucket("build", "300").String(), "0x30"},
		{bucket("build", "900").String(), "0+1x30"},
		{bucket("build", "+Inf").String(), "0+1x30"},
		{bucket("fine", "300").String(), "0+1x30"},
		{bucket("fine", "900").String(), "0+1x30"},
		{bucket("fine", "+Inf").String(), "0+1x30"},
		// A NodePool at 96 of 100 cpu; another at 10.
		{usage.with(map[string]string{"nodepool": "rf-team-a-build"}).String(), "96x30"},
		{limit.with(map[string]string{"nodepool": "rf-team-a-build"}).String(), "100x30"},
		{usage.with(map[string]string{"nodepool": "rf-team-a-fine"}).String(), "10x30"},
		{limit.with(map[string]string{"nodepool": "rf-team-a-fine"}).String(), "100x30"},
		// The capacity step fails every minute.
		{errs.String(), "0+1x30"},
		// GitLab refuses one team's job requests (403) from minute 5; the
		// neighbour's are answered (204: no job).
		{refused.with(team).String(), "0x5 1+4x25"},
		{answered.with(ok).String(), "0+4x30"},
		// A node taken under one team's jobs every minute from minute 10;
		// the neighbour loses one job, once.
		{interrupted.with(team).String(), "0x10 1+1x20"},
		{interrupted.with(ok).String(), "0x10 1x20"},
	}
	for _, s := range in {
		name := s.Series[:strings.Index(s.Series, "{")]
		if !exported(t, name) {
			t.Errorf("%s is not a metric any exporter produces", name)
		}
	}
	cases := []alertCase{
		{"14m", monitoring.AlertNotReady, nil},
		{"20m", monitoring.AlertNotReady, []expAlert{expect(t, monitoring.AlertNotReady, map[string]string{"namespace": "team-a", "runnerset": "build", "class": ready.labels["class"]})}},
		{"20m", monitoring.AlertTokenExpiresSoon, []expAlert{expect(t, monitoring.AlertTokenExpiresSoon, team)}},
		{"20m", monitoring.AlertDrainOverdue, []expAlert{expect(t, monitoring.AlertDrainOverdue, team)}},
		{"28m", monitoring.AlertJobsQueueing, []expAlert{expect(t, monitoring.AlertJobsQueueing, team)}},
		{"20m", monitoring.AlertCapacityAtLimit, []expAlert{expect(t, monitoring.AlertCapacityAtLimit, map[string]string{"nodepool": "rf-team-a-build", "resource_type": usage.labels["resource_type"]})}},
		{"10m", monitoring.AlertTokenRefused, nil},
		{"20m", monitoring.AlertTokenRefused, []expAlert{expect(t, monitoring.AlertTokenRefused, team)}},
		{"12m", monitoring.AlertJobsInterrupted, nil},
		{"20m", monitoring.AlertJobsInterrupted, []expAlert{expect(t, monitoring.AlertJobsInterrupted, team)}},
		{"20m", monitoring.AlertReconcileFailures, []expAlert{expect(t, monitoring.AlertReconcileFailures, map[string]string{"step": v1alpha1.ConditionCapacityReady})}},
	}
	rules, err := monitoring.RuleFileYAML(cost.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("runnerfleet.rules.yaml", rules)
	if out, err := promtool.Run(dir, nil, "check", "rules", "runnerfleet.rules.yaml"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tests, err := yaml.Marshal(ruleTests{RuleFiles: []string{"runnerfleet.rules.yaml"}, EvaluationInterval: "1m",
		Tests: []ruleTest{{Interval: "1m", InputSerie: in, AlertRules: cases}}})
	if err != nil {
		t.Fatal(err)
	}
	write("runnerfleet.test.yaml", tests)
	if out, err := promtool.Run(dir, nil, "test", "rules", "runnerfleet.test.yaml"); err != nil {
		t.Errorf("%v\n%s", err, out)
	}

	// The negative control: the same test fails when a rule's threshold is
	// off (the token alert asked for 5 days instead of 7).
	broken := strings.Replace(string(rules), fmt.Sprint(7*24*3600), fmt.Sprint(5*24*3600), 1)
	if broken == string(rules) {
		t.Fatal("the token threshold is not in the rule file")
	}
	write("runnerfleet.rules.yaml", []byte(broken))
	if out, err := promtool.Run(dir, nil, "test", "rules", "runnerfleet.test.yaml"); err == nil {
		t.Errorf("promtool passed the tests with a 5-day token threshold:\n%s", out)
	}
}

// The PrometheusRule is judged by the operator's CRD on a real API server.
func TestThePrometheusRuleIsValidByTheOperatorsCRD(t *testing.T) {
	pr := monitoring.PrometheusRule("default", map[string]string{"release": "kube-prometheus-stack"}, cost.Defaults())
	if err := env.Client.Create(context.Background(), pr, client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("the operator's CRD refuses the PrometheusRule: %v", err)
	}
	// The negative control: the same CRD refuses a rule whose for is no duration.
	bad := pr.DeepCopy()
	soon := monitoringv1.Duration("soon")
	bad.Spec.Groups[0].Rules[0].For = &soon
	if err := env.Client.Create(context.Background(), bad, client.DryRunAll); err == nil {
		t.Error("the CRD accepted for: soon")
	}
}
