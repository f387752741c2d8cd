//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/charts/release"
	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// The three install paths into a cluster: the chart through the Helm SDK,
// charts/manifests/install.yaml server-side applied, and fleet up
// --kubeconfig; the local example's RunnerSet must become Ready.
//
// By default each path runs on a local control plane of its own (real
// kube-apiserver, scheduler, controller-manager, Karpenter's kwok
// provider). The chart is installed as released, with no values, on a
// cluster whose one node is the real node: the controller image is built as
// make image builds it, tagged as the chart's default, imported into the
// node's containerd, and the controller runs in its pod, with the chart's
// ServiceAccount, security context and probes, reaching the API server
// through the kubernetes Service. The other two paths run on kwok nodes,
// whose pods run no code: there the test runs the built controller binary
// as a process with a token of the installed ServiceAccount (so with the
// installed ClusterRole only) and the installed Deployment's arguments.
//
// With RUNNERFLEET_E2E_KUBECONFIG the three paths run one after the other
// on that cluster, each removing what it installed: where its nodes run
// containers (kind, minikube), the controller runs in its pod from the
// image the install names (version.Image), which the cluster must have
// (loaded from make image, or pulled once released); on a cluster of kwok
// nodes only, as a process as above. The manifests path then runs one job
// pod, shaped as the kubernetes executor shapes it, on a node Karpenter
// brings up from the team's own NodePool.
func TestInstallPathsIntoACluster(t *testing.T) {
	t.Parallel() // its paths wait for their lanes
	root := repoRoot(t)
	bin := buildBinaries(t, root)
	ns := install.Defaults().Namespace
	for _, path := range []string{"helm", "manifests", "fleet"} {
		t.Run(path, func(t *testing.T) {
			if path == "helm" && existingKubeconfig() == "" {
				onRealNode(t) // the controller from its image, in the real node's containerd
			} else {
				onKWOKCluster(t)
			}
			ctx := context.Background()
			cl := startCluster(t, localcluster.Options{Name: "install-" + path, RepoRoot: root, Karpenter: true, Node: path == "helm"})
			cl.needsKarpenterKWOK(t)
			if cl.RealNode {
				b := time.Now()
				rep, err := release.Build(ctx, release.Options{Root: root, Out: t.TempDir(), Version: version.Tag, Only: []string{install.Name}, ImagesOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				img := rep.Images[0]
				if img.Ref != version.Image(install.Name) {
					t.Fatalf("built %s, but the chart's default image is %s", img.Ref, version.Image(install.Name))
				}
				if err := cl.local.ImportImage(ctx, img.Ref, img.Archive); err != nil {
					t.Fatal(err)
				}
				t.Logf("built the controller image %s (%.1f MB) and imported it into the real node in %.1fs", img.Ref, float64(img.Platforms[0].Size)/1e6, time.Since(b).Seconds())
			} else if cl.RunsContainers {
				t.Logf("the controller runs in its pod from %s, which the cluster must have: make image VERSION=%s, then kind load image-archive dist/images/%s.tar (or minikube image load)", version.Image(install.Name), version.Tag, install.Name)
			}
			start := time.Now()
			var sets []client.ObjectKey
			switch path {
			case "helm":
				flags := genericclioptions.NewConfigFlags(false)
				flags.KubeConfig, flags.Namespace = ptr.To(cl.Kubeconfig), ptr.To(ns)
				cfg := &action.Configuration{}
				if err := cfg.Init(flags, ns, "secret", t.Logf); err != nil {
					t.Fatal(err)
				}
				ch, err := loader.Load(filepath.Join(root, "charts", charts.ChartName))
				if err != nil {
					t.Fatal(err)
				}
				inst := action.NewInstall(cfg)
				inst.ReleaseName, inst.Namespace, inst.CreateNamespace, inst.Timeout = "runnerfleet", ns, true, time.Minute
				if _, err := inst.Run(ch, nil); err != nil {
					t.Fatalf("helm install: %v", err)
				}
			case "manifests":
				applyDocs(ctx, t, cl.Client, charts.InstallYAML())
			case "fleet":
				if !cl.RunsContainers {
					// fleet waits for the RunnerSet; the controller starts
					// once fleet has installed its ServiceAccount.
					go func() {
						for cl.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.Name}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ServiceAccount"}}) != nil {
							time.Sleep(200 * time.Millisecond)
						}
						startControllerAsServiceAccount(ctx, t, cl, bin, ns)
					}()
				}
				args := []string{"up", "--stack", "local", "--kubeconfig", cl.Kubeconfig, "--timeout", "4m"}
				if cl.Existing {
					// The local stack's managers run the stand-in image
					// that only this machine's real node has; elsewhere
					// they run the example's gitlab-runner.
					args = append(args, "--config", localStackWithExampleManagers(t, root))
				}
				run(t, t.TempDir(), 5*time.Minute, filepath.Join(bin, "fleet"), args...)
				t.Logf("fleet up --kubeconfig: install to Ready in %.1fs", time.Since(start).Seconds())
				return
			}
			if cl.RunsContainers {
				waitControllerPod(ctx, t, cl, ns)
			} else {
				startControllerAsServiceAccount(ctx, t, cl, bin, ns)
			}
			for _, f := range []string{"runnerclass.yaml", "runnerset.yaml"} {
				b, err := os.ReadFile(filepath.Join(root, "examples", "local", f))
				if err != nil {
					t.Fatal(err)
				}
				if cl.RealNode {
					// The real node has no registry to pull gitlab-runner
					// from: its managers run the stand-in, as the local
					// stack's do.
					b = managerImageLine.ReplaceAll(b, []byte("${1} "+localcluster.StandinImage))
				}
				sets = append(sets, applyDocs(ctx, t, cl.Client, b)...)
			}
			waitFor(t, 4*time.Minute, "the example RunnerSet Ready", func() error {
				for _, k := range sets {
					rs := &v1alpha1.RunnerSet{}
					if err := cl.Client.Get(ctx, k, rs); err != nil {
						return err
					}
					if !rs.IsReady() {
						return fmt.Errorf("%s: %+v", k, rs.Status.Conditions)
					}
				}
				return nil
			})
			t.Logf("%s: install to Ready in %.1fs", path, time.Since(start).Seconds())
			if path == "manifests" {
				for _, k := range sets {
					rs := &v1alpha1.RunnerSet{}
					if err := cl.Client.Get(ctx, k, rs); err != nil {
						t.Fatal(err)
					}
					jobOnItsOwnCapacity(ctx, t, cl, rs)
				}
			}
		})
	}
}

// managerImageLine is a RunnerClass's or stack config's managerImage line.
var managerImageLine = regexp.MustCompile(`(?m)^(\s*managerImage:)(.*)$`)

// exampleManagerImage is the manager image of examples/local/runnerclass.yaml.
func exampleManagerImage(t *testing.T, root string) string {
	t.Helper()
	class, err := os.ReadFile(filepath.Join(root, "examples", "local", "runnerclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := managerImageLine.FindSubmatch(class)
	if m == nil {
		t.Fatal("examples/local/runnerclass.yaml has no managerImage line")
	}
	return strings.TrimSpace(string(m[2]))
}

// localStackWithExampleManagers writes stacks/Pulumi.local.yaml with the
// manager image of examples/local/runnerclass.yaml, and returns its path.
func localStackWithExampleManagers(t *testing.T, root string) string {
	t.Helper()
	stack, err := os.ReadFile(filepath.Join(root, "stacks", "Pulumi.local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !managerImageLine.Match(stack) {
		t.Fatal("stacks/Pulumi.local.yaml has no managerImage line")
	}
	out := filepath.Join(t.TempDir(), "Pulumi.local.yaml")
	if err := os.WriteFile(out, managerImageLine.ReplaceAll(stack, []byte("${1} "+exampleManagerImage(t, root))), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// jobOnItsOwnCapacity is the capacity check of the install paths: one job
// pod as gitlab-runner's kubernetes executor builds it from the config.toml
// the controller wrote for rs runs on a node of rs's own NodePool, which
// Karpenter brought up for it.
func jobOnItsOwnCapacity(ctx context.Context, t *testing.T, cl *cluster, rs *v1alpha1.RunnerSet) {
	t.Helper()
	start := time.Now()
	pod := executorPod(configOf(t, cl.Client, rs), 0)
	create(t, cl.Client, pod)
	defer func() { _ = cl.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)) }()
	pool := naming.For(rs.Namespace, rs.Name).Capacity()
	// On failure: what happened to the pod and to the pool's nodes (a pod
	// that vanished was deleted: by whom is in the events and Karpenter's
	// log), kept as test output.
	defer func() {
		if !t.Failed() {
			return
		}
		events := &corev1.EventList{}
		if err := cl.Client.List(context.Background(), events, client.InNamespace(pod.Namespace)); err == nil {
			for _, ev := range events.Items {
				t.Logf("event %s %s/%s: %s %s: %s", ev.LastTimestamp.Format(time.RFC3339), ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message)
			}
		}
		claims := &karpv1.NodeClaimList{}
		if err := cl.Client.List(context.Background(), claims); err == nil {
			for _, nc := range claims.Items {
				t.Logf("nodeclaim %s (pool %s): node %q, deleting %v, conditions %v", nc.Name, nc.Labels[karpv1.NodePoolLabelKey], nc.Status.NodeName, nc.DeletionTimestamp != nil, nc.Status.Conditions)
			}
		}
		if cl.local != nil {
			t.Logf("karpenter's log (last 60 lines):\n%s", localcluster.Tail(filepath.Join(localcluster.LogsDir(cl.local.Dir), "karpenter.log"), 60))
			t.Logf("kube-controller-manager's log (last 30 lines):\n%s", localcluster.Tail(filepath.Join(localcluster.LogsDir(cl.local.Dir), "kube-controller-manager.log"), 30))
		}
	}()
	waitFor(t, 3*time.Minute, "a job pod of "+rs.Namespace+"/"+rs.Name+" Running on a node of NodePool "+pool, func() error {
		cur := &corev1.Pod{}
		if err := cl.Client.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return err
		}
		if cur.Status.Phase != corev1.PodRunning || cur.Spec.NodeName == "" {
			return fmt.Errorf("pod %s: %s on %q", cur.Name, cur.Status.Phase, cur.Spec.NodeName)
		}
		node := &corev1.Node{}
		if err := cl.Client.Get(ctx, client.ObjectKey{Name: cur.Spec.NodeName}, node); err != nil {
			return err
		}
		if got := node.Labels[karpv1.NodePoolLabelKey]; got != pool {
			t.Fatalf("job pod %s runs on node %s of NodePool %q, want %s", cur.Name, node.Name, got, pool)
		}
		return nil
	})
	t.Logf("a job pod of %s/%s ran on a node of its NodePool %s %.1fs after it was created", rs.Namespace, rs.Name, pool, time.Since(start).Seconds())
}

// waitControllerPod waits until the installed controller runs Ready in its
// pod (on the real node when the cluster has it), and fails with the pod's
// state and log otherwise.
func waitControllerPod(ctx context.Context, t *testing.T, cl *cluster, ns string) {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := cl.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(install.Selector())); err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			last = p
			if (!cl.RealNode || p.Spec.NodeName == localcluster.NodeName) && podReady(p) {
				t.Logf("controller pod %s Ready on %s", p.Name, p.Spec.NodeName)
				return true, nil
			}
		}
		return false, nil
	})
	if err == nil {
		return
	}
	state := "no pod"
	if last != nil {
		state = podState(last)
	}
	var tail string
	if cl.RealNode {
		logs, _ := filepath.Glob(filepath.Join(localcluster.PodLogsDir(cl.local.Dir), ns+"_*", "*", "*.log"))
		for _, l := range logs {
			tail += l + ":\n" + localcluster.Tail(l, 20) + "\n"
		}
	} else if last != nil {
		tail = podLogTail(ctx, cl, last, 20)
	}
	hint := ""
	if cl.Existing && strings.Contains(state, "Image") {
		hint = fmt.Sprintf("\nthe cluster cannot pull %s: load it first (make image VERSION=%s, then kind load image-archive dist/images/%s.tar, or minikube image load)", version.Image(install.Name), version.Tag, install.Name)
	}
	t.Fatalf("the controller never ran Ready in its pod: %s%s\n%s", state, hint, tail)
}

// podLogTail reads the last lines of a pod's first container through the
// API server.
func podLogTail(ctx context.Context, cl *cluster, p *corev1.Pod, lines int64) string {
	cfg, err := clientcmd.BuildConfigFromFlags("", cl.Kubeconfig)
	if err != nil {
		return err.Error()
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err.Error()
	}
	b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("logs of pod %s: %v", p.Name, err)
	}
	return string(b)
}

func applyDocs(ctx context.Context, t *testing.T, c client.Client, b []byte) []client.ObjectKey {
	t.Helper()
	docs, err := charts.ObjectsOf(b)
	if err != nil {
		t.Fatal(err)
	}
	var sets []client.ObjectKey
	for _, d := range docs {
		u := &unstructured.Unstructured{Object: d}
		// Right after an install the API server may still be settling
		// (install.Settling): as a user would, apply again.
		for deadline := time.Now().Add(install.SettleTimeout); ; time.Sleep(250 * time.Millisecond) {
			err := c.Patch(ctx, u, client.Apply, client.FieldOwner("e2e"), client.ForceOwnership)
			if err == nil {
				break
			}
			if !install.Settling(err) || time.Now().After(deadline) {
				t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
			t.Logf("%s %s: %v; the API server is settling after the install, applying again", u.GetKind(), u.GetName(), err)
		}
		if u.GetKind() == "CustomResourceDefinition" {
			waitFor(t, time.Minute, "CRD "+u.GetName()+" established", func() error {
				crd := &apiextensionsv1.CustomResourceDefinition{}
				if err := c.Get(ctx, client.ObjectKey{Name: u.GetName()}, crd); err != nil {
					return err
				}
				for _, cond := range crd.Status.Conditions {
					if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
						return nil
					}
				}
				return fmt.Errorf("not established")
			})
		}
		if u.GetKind() == "RunnerSet" {
			sets = append(sets, client.ObjectKeyFromObject(u))
		}
	}
	return sets
}

// startControllerAsServiceAccount runs the controller binary here with a
// token of the installed ServiceAccount and the installed Deployment's
// arguments (ports moved to free local ones), until the cluster's cleanup.
func startControllerAsServiceAccount(ctx context.Context, t *testing.T, cl *cluster, bin, ns string) {
	cfg, err := clientcmd.BuildConfigFromFlags("", cl.Kubeconfig)
	if err != nil {
		t.Error(err)
		return
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Error(err)
		return
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, install.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("a token of the installed ServiceAccount: %v", err)
		return
	}
	raw, err := clientcmd.LoadFromFile(cl.Kubeconfig)
	if err != nil {
		t.Error(err)
		return
	}
	for _, a := range raw.AuthInfos {
		a.ClientCertificateData, a.ClientKeyData, a.ClientCertificate, a.ClientKey = nil, nil, "", ""
		a.Exec, a.AuthProvider, a.Username, a.Password, a.TokenFile = nil, nil, "", "", ""
		a.Token = tok.Status.Token
	}
	kc := filepath.Join(t.TempDir(), "controller.kubeconfig")
	if err := clientcmd.WriteToFile(*raw, kc); err != nil {
		t.Error(err)
		return
	}
	metrics, _ := localcluster.FreePort()
	probe, _ := localcluster.FreePort()
	args := []string{"--kubeconfig=" + kc, "--leader-election-namespace=" + ns}
	for _, a := range install.Defaults().Args() {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics)
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe)
		}
		args = append(args, a)
	}
	if err := cl.startProcess(t, localcluster.Controller, filepath.Join(bin, localcluster.Controller), args, fmt.Sprintf("http://127.0.0.1:%d/readyz", probe)); err != nil {
		t.Errorf("starting the controller as %s/%s: %v", ns, install.Name, err)
	}
}
