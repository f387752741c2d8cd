//go:build e2e

package e2e

// NetworkPolicy enforced on the real node (kube-router's network policy
// controller, localstack/localcluster/networkpolicy.go): a job pod of one
// team reaches neither another team's job pod nor any manager; the
// monitoring (a pod of a monitoring namespace, and the local stack's
// Prometheus on the host) still scrapes the managers, a job's own services
// still reach each other, and the managers still run jobs. With the
// policies deleted (the controller stopped, so that it does not put them
// back) the same probes get through: the negative control.
//
// Job pods normally run on Karpenter's kwok nodes, which have no network;
// the probe pods stand in for job pods on the real node, in the jobs
// namespaces the controller made, under the policies it wrote. That is what
// a job pod is to a NetworkPolicy: a pod of its namespace (the jobs
// namespace's policy selects every pod there, whatever its labels). What
// differs on a cloud cluster is the path (node to node instead of one
// bridge), which the cloud's data plane enforces (docs/operations/disruptions.md).

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/provisioning/prometheus"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
)

// probeServerPort is where a stand-in job pod serves (busybox httpd).
const probeServerPort = 8080

// target is an address a probe connects to.
type target struct {
	what string
	addr string
}

func (e *nodeEnv) proveNetworkIsolation(t *testing.T) {
	ctx := context.Background()
	a := e.newTeam("netpol-a", 1, 1, time.Minute)
	b := e.newTeam("netpol-b", 1, 1, time.Minute)
	e.collectOnFailure(t, a)
	e.collectOnFailure(t, b)
	defer e.release(a)
	defer e.release(b)
	aJobs := naming.For(a.ns, a.rs.Name).JobsNamespace()
	bJobs := naming.For(b.ns, b.rs.Name).JobsNamespace()
	const monitoringNS = "netpol-monitoring"
	create(t, e.c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: monitoringNS}})
	defer func() { _ = e.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: monitoringNS}}) }()

	serve := []string{"/bin/busybox", "httpd", "-f", "-p", strconv.Itoa(probeServerPort), "-h", "/bin"}
	sleep := []string{"/bin/busybox", "sleep", "3600"}
	bServer := e.probePod(t, bJobs, "job-b", serve)
	bPeer := e.probePod(t, bJobs, "job-b-service", sleep)
	aJob := e.probePod(t, aJobs, "job-a", sleep)
	monitor := e.probePod(t, monitoringNS, "prometheus", sleep)
	metrics := func(tm *team) target {
		ms := e.managers(tm)
		if len(ms) != 1 || ms[0].Status.PodIP == "" {
			t.Fatalf("want one manager of %s with an IP, have %d", tm.ns, len(ms))
		}
		return target{"manager " + tm.ns + "/" + ms[0].Name + " metrics", netJoin(ms[0].Status.PodIP, gitlabrunner.MetricsPort)}
	}
	bJob := target{"team B's job pod " + bJobs + "/" + bServer.Name, netJoin(bServer.Status.PodIP, probeServerPort)}
	aMetrics, bMetrics := metrics(a), metrics(b)
	forbidden := []target{bJob, bMetrics, aMetrics}

	// What must get through does.
	e.expectReach(t, bPeer, bJob, true, "a job's services reach each other")
	e.expectReach(t, monitor, aMetrics, true, "the monitoring scrapes the managers")
	e.expectReach(t, monitor, bMetrics, true, "the monitoring scrapes the managers")
	prom := e.startManagersPrometheus(t)
	e.expectScraped(t, prom, a, b)
	job := e.gl.QueueJob([]string{a.tag}, 2*time.Second)
	waitFor(t, 3*time.Minute, "team A's job run by its manager", func() error {
		for _, j := range e.jobsOf(a) {
			if j.ID == job && j.State == gitlabserver.JobSuccess {
				return nil
			}
		}
		return fmt.Errorf("job %d not succeeded", job)
	})

	// What must not, does not.
	start := time.Now()
	for _, tg := range forbidden {
		e.expectReach(t, aJob, tg, false, "a job reaches no other team's job and no manager")
	}
	t.Logf("team A's job reaches none of %d targets (%s)", len(forbidden), time.Since(start).Round(time.Millisecond))

	// Negative control: the same probes without the policies. The
	// controller is stopped first, or it would put them back.
	if err := e.cl.StopProcess(localcluster.Controller, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			e.startController()
		}
	}()
	policies := []client.ObjectKey{
		{Namespace: bJobs, Name: naming.For(b.ns, b.rs.Name).JobsNetworkPolicy()},
		{Namespace: a.ns, Name: naming.For(a.ns, a.rs.Name).Managers()},
		{Namespace: b.ns, Name: naming.For(b.ns, b.rs.Name).Managers()},
	}
	for _, k := range policies {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
		if err := e.c.Delete(ctx, np); err != nil {
			t.Fatalf("deleting NetworkPolicy %s: %v", k, err)
		}
	}
	for _, tg := range forbidden {
		e.expectReach(t, aJob, tg, true, "negative control: without the NetworkPolicies")
	}
	e.startController()
	restarted = true
	waitFor(t, time.Minute, "the controller putting the NetworkPolicies back", func() error {
		for _, k := range policies {
			if err := e.c.Get(ctx, k, &networkingv1.NetworkPolicy{}); err != nil {
				return err
			}
		}
		return nil
	})
	for _, tg := range forbidden {
		e.expectReach(t, aJob, tg, false, "the NetworkPolicies put back")
	}
	e.expectReach(t, monitor, bMetrics, true, "the monitoring scrapes the managers")
}

func netJoin(ip string, port int) string { return ip + ":" + strconv.Itoa(port) }

// probePod runs the stand-in image (its busybox) on the real node in ns,
// labelled as a job pod in a jobs namespace, and returns it once it runs
// Ready with an IP.
func (e *nodeEnv) probePod(t *testing.T, ns, name string, command []string) *corev1.Pod {
	t.Helper()
	taint := resources.ManagerNodeTaint()
	labels := map[string]string{"app.kubernetes.io/name": name}
	if strings.HasPrefix(name, "job-") {
		labels[resources.LabelComponent] = resources.ComponentJob
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      localcluster.NodeName,
			Tolerations:                   []corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpExists, Effect: taint.Effect}},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name: "probe", Image: e.imgs.Standin, ImagePullPolicy: corev1.PullNever, Command: command,
			}},
		},
	}
	// A namespace made moments ago may not have its default ServiceAccount
	// yet, which admission wants for the pod.
	waitFor(t, time.Minute, "ServiceAccount default in "+ns, func() error {
		return e.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
	})
	create(t, e.c, p)
	t.Cleanup(func() {
		if err := e.c.Delete(context.Background(), p); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting probe pod %s/%s: %v", ns, name, err)
		}
	})
	waitFor(t, 2*time.Minute, "probe pod "+ns+"/"+name+" running", func() error {
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		if !podReady(p) || p.Status.PodIP == "" {
			return fmt.Errorf("%s", podState(p))
		}
		return nil
	})
	return p
}

// reach asks from (with busybox nc, through kubectl exec) for an HTTP
// response from tg: true when one came back.
func (e *nodeEnv) reach(from *corev1.Pod, tg target) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, port, _ := strings.Cut(tg.addr, ":")
	script := fmt.Sprintf(`printf 'GET /metrics HTTP/1.0\r\n\r\n' | /bin/busybox nc -w 3 %s %s`, host, port)
	cmd := exec.CommandContext(ctx, filepath.Join(e.cl.State.Assets, "kubectl"), "--kubeconfig", e.cl.Kubeconfig,
		"exec", "-n", from.Namespace, from.Name, "--", "/bin/sh", "-c", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	first, _, _ := strings.Cut(out.String(), "\n")
	return err == nil && strings.HasPrefix(first, "HTTP/"), fmt.Sprintf("%v: %s", err, strings.TrimSpace(first))
}

// expectReach waits until a probe from from to tg gets through (want) or
// not, then checks that it stays so for three more probes.
func (e *nodeEnv) expectReach(t *testing.T, from *corev1.Pod, tg target, want bool, why string) {
	t.Helper()
	verb := map[bool]string{true: "reaches", false: "does not reach"}[want]
	what := fmt.Sprintf("%s/%s %s %s (%s): %s", from.Namespace, from.Name, verb, tg.what, tg.addr, why)
	waitFor(t, time.Minute, what, func() error {
		if got, detail := e.reach(from, tg); got != want {
			return fmt.Errorf("probe: %s", detail)
		}
		return nil
	})
	for range 3 {
		if got, detail := e.reach(from, tg); got != want {
			t.Errorf("%s: a later probe disagrees: %s", what, detail)
		}
	}
}

// startManagersPrometheus runs the local stack's Prometheus on the host,
// scraping every RunnerSet's managers as `fleet up` configures it.
func (e *nodeEnv) startManagersPrometheus(t *testing.T) string {
	t.Helper()
	managers := monitoring.ManagersScrapeConfig("2s")
	for i := range managers.KubernetesSDConfigs {
		managers.KubernetesSDConfigs[i].KubeconfigFile = e.cl.Kubeconfig
	}
	cfg, err := yaml.Marshal(map[string]any{
		"global":         prometheus.Global{ScrapeInterval: "2s", EvaluationInterval: "2s"},
		"scrape_configs": []any{managers},
	})
	if err != nil {
		t.Fatal(err)
	}
	url, err := e.cl.StartPrometheus(context.Background(), map[string][]byte{localcluster.PrometheusConfig: cfg}, time.Minute, &logWriter{t: t, prefix: "prometheus: "})
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// expectScraped waits until Prometheus has every manager of the teams up.
func (e *nodeEnv) expectScraped(t *testing.T, prom string, teams ...*team) {
	t.Helper()
	waitFor(t, 2*time.Minute, "Prometheus scraping the managers (target up)", func() error {
		var targets struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := promAPI(prom, "/api/v1/targets?state=active", &targets); err != nil {
			return err
		}
		for _, tm := range teams {
			for _, m := range e.managers(tm) {
				up := false
				for _, tg := range targets.ActiveTargets {
					if tg.Labels["namespace"] == tm.ns && tg.Labels["pod"] == m.Name {
						if tg.Health != "up" {
							return fmt.Errorf("manager %s/%s: %s %s", tm.ns, m.Name, tg.Health, tg.LastError)
						}
						up = true
					}
				}
				if !up {
					return fmt.Errorf("no target for manager %s/%s among %d", tm.ns, m.Name, len(targets.ActiveTargets))
				}
			}
		}
		return nil
	})
}

// networkPolicyRulesLeft lists the enforcer's iptables rules and chains on
// this machine (none should outlive the cluster: the next one's pods get
// other addresses, or the same ones).
func networkPolicyRulesLeft(t *testing.T) string {
	out, err := exec.Command("iptables", "-w", "-S").CombinedOutput()
	if err != nil {
		t.Errorf("iptables -S: %v: %s", err, out)
		return ""
	}
	var left []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "KUBE-ROUTER-") || strings.Contains(l, "KUBE-POD-FW-") || strings.Contains(l, "KUBE-NWPLCY-") {
			left = append(left, l)
		}
	}
	return strings.Join(left, "\n")
}
