package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/infra/stackconfig"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/runnerset/cost"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

// The local stack's Prometheus scrapes what a cluster install's Prometheus
// scrapes (the controller, every RunnerSet's managers through their
// headless Services) and loads the same alert rules, so that what
// charts/monitoring ships is exercised on every `fleet up --stack local`.
const (
	// localScrapeInterval is short: a developer watches a few minutes.
	localScrapeInterval = "10s"
	// localRulesFile is the rule file beside prometheus.yml.
	localRulesFile = "runnerfleet.rules.yaml"
	// Job names of the static scrapes.
	controllerJob = localcluster.Controller
	karpenterJob  = localcluster.Karpenter
)

// localPrometheusConfig is the prometheus.yml of the local stack:
// endpoints maps a process to its metrics URL (the cluster state's), and
// kubeconfig lets Prometheus, outside the cluster, discover the managers.
type localPrometheusConfig struct {
	Global        prometheus.Global `json:"global"`
	RuleFiles     []string          `json:"rule_files"`
	ScrapeConfigs []any             `json:"scrape_configs"`
}

// localPrometheusFiles builds the local Prometheus' files from the URLs of
// the controller's and Karpenter's metrics and the cluster's kubeconfig.
func localPrometheusFiles(controllerMetrics, karpenterMetrics, kubeconfig string, prices cost.Table) (map[string][]byte, error) {
	cfg := localPrometheusConfig{
		Global:    prometheus.Global{ScrapeInterval: localScrapeInterval, EvaluationInterval: localScrapeInterval},
		RuleFiles: []string{localRulesFile},
	}
	for _, s := range []struct{ job, metrics string }{{controllerJob, controllerMetrics}, {karpenterJob, karpenterMetrics}} {
		u, err := url.Parse(s.metrics)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("the local stack's %s has no metrics endpoint (%q): run fleet up again", s.job, s.metrics)
		}
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, prometheus.ScrapeConfig{
			JobName: s.job, MetricsPath: u.Path, StaticConfigs: []prometheus.StaticConfig{{Targets: []string{u.Host}}},
		})
	}
	managers := monitoring.ManagersScrapeConfig(localScrapeInterval)
	for i := range managers.KubernetesSDConfigs {
		managers.KubernetesSDConfigs[i].KubeconfigFile = kubeconfig
	}
	cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, managers)
	config, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	rules, err := monitoring.RuleFileYAML(prices)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{localcluster.PrometheusConfig: config, localRulesFile: rules}, nil
}

// localPrices is the local stack's price table: the prices of the kwok
// provider's instance types (its job nodes), with the stack config's
// cost.prices over them and over the defaults.
func localPrices(ctx context.Context, stack *stackconfig.Fleet) (cost.Table, error) {
	kwok, err := localcluster.KWOKPrices(ctx)
	if err != nil {
		return cost.Table{}, err
	}
	t := &cost.Table{Prices: kwok}
	if stack.Cost != nil {
		t.Currency = stack.Cost.Currency
		t.Prices = append(t.Prices, stack.Cost.Prices...)
	}
	return cost.Effective(t), nil
}

// startPrometheus runs (or keeps) the local stack's Prometheus.
func (s *localStack) startPrometheus(ctx context.Context, cl *localcluster.Cluster) error {
	file, err := s.stackFile()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	stack, err := parseStack(stackLocal, b)
	if err != nil {
		return err
	}
	prices, err := localPrices(ctx, stack.fleet)
	if err != nil {
		return err
	}
	files, err := localPrometheusFiles(cl.State.Endpoints[localcluster.Controller], cl.State.Endpoints[localcluster.Karpenter], cl.Kubeconfig, prices)
	if err != nil {
		return err
	}
	_, err = cl.StartPrometheus(ctx, files, time.Minute, s.stderr)
	return err
}
