package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/provisioning/drainagent"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// sharedFleetStatus is one shared fleet in fleet status: its managers'
// pods, the ones of an old generation (or a removed slot) draining.
type sharedFleetStatus struct {
	Name      string             `json:"name"`
	Namespace string             `json:"namespace"`
	Managers  []sharedManagerRow `json:"managers"`
	// JobsFrom says where the running jobs were read, or why not.
	JobsFrom string `json:"jobsFrom,omitempty"`
}

// sharedManagerRow is one manager pod.
type sharedManagerRow struct {
	Group   string `json:"group"`
	Manager string `json:"manager"`
	// Release is the manager's generation: its Helm release.
	Release string `json:"release"`
	Pod     string `json:"pod"`
	Phase   string `json:"phase"`
	// Draining: the pod is being deleted (its preStop SIGQUIT took it
	// out of new jobs); TimeLeft is how long its grace has left.
	Draining bool   `json:"draining"`
	TimeLeft string `json:"timeLeft,omitempty"`
	// Jobs are its running jobs; nil when they could not be read.
	Jobs *int `json:"runningJobs"`
}

// jobReader reads the running jobs of manager pods: from each pod's own
// metrics (gitlab_runner_jobs, which the stand-in runner serves too)
// through the API server's pod proxy, else, when the managers' network
// policy keeps the API server out, from the fleet's Prometheus, which
// scrapes every manager pod, draining ones included, through the API
// server's service proxy.
type jobReader struct {
	cs kubernetes.Interface
}

// podJobs reads pod's gitlab_runner_jobs from its metrics port.
func (r jobReader) podJobs(ctx context.Context, p *corev1.Pod) (int, error) {
	b, err := r.cs.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, strconv.Itoa(shared.MetricsPort), "metrics", nil).DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("pod %s/%s's metrics: %w", p.Namespace, p.Name, err)
	}
	return drainagent.CountJobs(strings.NewReader(string(b)))
}

// prometheusJobs reads the running jobs of every manager pod of namespace
// ns from the fleet's Prometheus, by pod.
func (r jobReader) prometheusJobs(ctx context.Context, ns string) (map[string]int, error) {
	q := fmt.Sprintf(`sum by (pod) (%s{job=%q, namespace=%q})`, drainagent.JobsMetric, shared.ManagersJob, ns)
	b, err := r.cs.CoreV1().Services(ns).ProxyGet("http", shared.PrometheusService, strconv.Itoa(shared.PrometheusPort), "api/v1/query", map[string]string{"query": q}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("the fleet's Prometheus (service %s/%s): %w", ns, shared.PrometheusService, err)
	}
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, fmt.Errorf("the fleet's Prometheus answered no query result: %w", err)
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("the fleet's Prometheus: %s", resp.Error)
	}
	out := map[string]int{}
	for _, s := range resp.Data.Result {
		v, _ := s.Value[1].(string)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return nil, fmt.Errorf("the fleet's Prometheus: %s for pod %s is no job count", v, s.Metric["pod"])
		}
		out[s.Metric["pod"]] = int(f + 0.5)
	}
	return out, nil
}

// sharedFleetStatuses are the stack's shared fleets as the cluster has
// them at now: every manager pod (labelled with its manager,
// shared.LabelRelease), draining ones first within a manager.
func sharedFleetStatuses(ctx context.Context, c client.Client, jobs jobReader, fleets []fleetspec.SharedFleet, now time.Time) ([]sharedFleetStatus, error) {
	out := []sharedFleetStatus{}
	for _, f := range fleets {
		ns := shared.Namespace(f)
		st := sharedFleetStatus{Name: f.Name, Namespace: ns, Managers: []sharedManagerRow{}}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{shared.LabelRelease}); err != nil {
			return nil, fmt.Errorf("listing the manager pods of shared fleet %s (namespace %s): %w", f.Name, ns, err)
		}
		// Each pod's own metrics until one cannot be read (the managers'
		// NetworkPolicy may keep the API server's proxy out: then every
		// pod would wait for its dial timeout), then the fleet's
		// Prometheus for the rest.
		var fromPrometheus map[string]int
		var podErr, promErr error
		for i := range pods.Items {
			p := &pods.Items[i]
			row := sharedManagerRow{Group: p.Labels[shared.LabelManagerPod], Manager: p.Labels[shared.LabelRelease],
				Release: p.Labels[shared.LabelChartApp], Pod: p.Name, Phase: string(p.Status.Phase)}
			if left, _, deleting := graceLeft(p, now); deleting {
				row.Draining, row.TimeLeft = true, dur(max(left, 0))
			}
			if p.Status.Phase == corev1.PodRunning {
				if podErr == nil {
					n, err := jobs.podJobs(ctx, p)
					if err == nil {
						row.Jobs = &n
					}
					podErr = err
				}
				if podErr != nil && fromPrometheus == nil && promErr == nil {
					fromPrometheus, promErr = jobs.prometheusJobs(ctx, ns)
				}
				if row.Jobs == nil && fromPrometheus != nil {
					if n, ok := fromPrometheus[p.Name]; ok {
						row.Jobs = &n
					}
				}
			}
			st.Managers = append(st.Managers, row)
		}
		switch {
		case podErr == nil:
			st.JobsFrom = "each manager's metrics"
		case promErr == nil:
			st.JobsFrom = fmt.Sprintf("the fleet's Prometheus (%v)", podErr)
		default:
			st.JobsFrom = fmt.Sprintf("nowhere: %v; %v", podErr, promErr)
		}
		sort.Slice(st.Managers, func(i, j int) bool {
			a, b := st.Managers[i], st.Managers[j]
			if a.Manager != b.Manager {
				return a.Manager < b.Manager
			}
			if a.Draining != b.Draining {
				return a.Draining
			}
			return a.Pod < b.Pod
		})
		out = append(out, st)
	}
	return out, nil
}

// printSharedFleets prints each fleet's managers: what runs, what drains,
// its jobs and the time its grace has left.
func printSharedFleets(w io.Writer, fleets []sharedFleetStatus) {
	for _, f := range fleets {
		draining := 0
		for _, m := range f.Managers {
			if m.Draining {
				draining++
			}
		}
		fmt.Fprintf(w, "\nShared fleet %s (namespace %s): %d manager pods, %d draining\n", f.Name, f.Namespace, len(f.Managers), draining)
		if len(f.Managers) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, "GROUP\tMANAGER\tRELEASE\tPOD\tSTATE\tJOBS\tTIME LEFT")
		for _, m := range f.Managers {
			state := strings.ToLower(m.Phase)
			if m.Draining {
				state = "draining"
			}
			jobs := "?"
			if m.Jobs != nil {
				jobs = strconv.Itoa(*m.Jobs)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dash(m.Group), dash(m.Manager), dash(m.Release), m.Pod, state, jobs, dash(m.TimeLeft))
		}
		_ = tw.Flush()
		fmt.Fprintf(w, "Running jobs from %s.\n", f.JobsFrom)
	}
}
