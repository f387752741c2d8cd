//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
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
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"
	karpenterapis "sigs.k8s.io/karpenter/pkg/apis"

	"github.com/runnerfleet/runnerfleet/charts"
	"github.com/runnerfleet/runnerfleet/internal/release"
	"github.com/runnerfleet/runnerfleet/internal/version"
	"github.com/runnerfleet/runnerfleet/provisioning/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
)

// The three install paths into an existing cluster, each on a local
// control plane of its own (real kube-apiserver, scheduler,
// controller-manager, Karpenter's kwok provider): the chart through the Helm
// SDK, charts/manifests/install.yaml server-side applied, and fleet up
// --kubeconfig; the local example's RunnerSet must become Ready.
//
// The chart is installed as released, with no values, on a cluster whose
// one node is the real node: the controller image is built as make image
// builds it, tagged as the chart's default, imported into the node's
// containerd, and the controller runs in its pod, with the chart's
// ServiceAccount, security context and probes, reaching the API server
// through the kubernetes Service. The other two paths run on kwok nodes,
// whose pods run no code: there the test runs the built controller binary
// as a process with a token of the installed ServiceAccount (so with the
// installed ClusterRole only) and the installed Deployment's arguments.
func TestInstallPathsOnTheLocalControlPlane(t *testing.T) {
	root := repoRoot(t)
	bin := t.TempDir()
	run(t, root, 10*time.Minute, "go", "build", "-o", bin+string(os.PathSeparator), "./cmd/fleet", "./cmd/runnerset-controller")
	ns := install.Defaults().Namespace
	for _, path := range []string{"helm", "manifests", "fleet"} {
		t.Run(path, func(t *testing.T) {
			ctx := context.Background()
			state := t.TempDir()
			var crds []*apiextensionsv1.CustomResourceDefinition
			for _, c := range append(append([]*apiextensionsv1.CustomResourceDefinition{}, karpenterapis.CRDs...), kwokapis.CRDs...) {
				crds = append(crds, c.DeepCopy())
			}
			realNode := path == "helm"
			cl, err := localcluster.Up(ctx, localcluster.Options{Dir: state, Name: "install-" + path, RepoRoot: root, CRDs: crds, Karpenter: true, Node: realNode, Log: &logWriter{t: t, prefix: "localcluster: "}})
			t.Cleanup(func() { _ = localcluster.DownWithTimeout(context.Background(), state, 20*time.Second, io.Discard) })
			if err != nil {
				t.Fatal(err)
			}
			if realNode {
				b := time.Now()
				rep, err := release.Build(ctx, release.Options{Root: root, Out: t.TempDir(), Version: version.Tag, Only: []string{install.Name}, ImagesOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				img := rep.Images[0]
				if img.Ref != version.Image(install.Name) {
					t.Fatalf("built %s, but the chart's default image is %s", img.Ref, version.Image(install.Name))
				}
				if err := cl.ImportImage(ctx, img.Ref, img.Archive); err != nil {
					t.Fatal(err)
				}
				t.Logf("built the controller image %s (%.1f MB) and imported it into the real node in %.1fs", img.Ref, float64(img.Size)/1e6, time.Since(b).Seconds())
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
				// fleet waits for the RunnerSet; the controller starts once
				// fleet has installed its ServiceAccount.
				go func() {
					for cl.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.Name}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ServiceAccount"}}) != nil {
						time.Sleep(200 * time.Millisecond)
					}
					startControllerAsServiceAccount(ctx, t, cl, bin, ns)
				}()
				run(t, t.TempDir(), 5*time.Minute, filepath.Join(bin, "fleet"), "up", "--stack", "local", "--kubeconfig", cl.Kubeconfig, "--timeout", "4m")
				t.Logf("fleet up --kubeconfig: install to Ready in %.1fs", time.Since(start).Seconds())
				return
			}
			if realNode {
				waitControllerPod(ctx, t, cl, ns)
			} else {
				startControllerAsServiceAccount(ctx, t, cl, bin, ns)
			}
			for _, f := range []string{"runnerclass.yaml", "runnerset.yaml"} {
				b, err := os.ReadFile(filepath.Join(root, "examples", "local", f))
				if err != nil {
					t.Fatal(err)
				}
				if realNode {
					// The real node has no registry to pull gitlab-runner
					// from: its managers run the stand-in, as the local
					// stack's do.
					b = regexp.MustCompile(`(?m)^(\s*managerImage:).*$`).ReplaceAll(b, []byte("${1} "+localcluster.StandinImage))
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
		})
	}
}

// waitControllerPod waits until the installed controller runs Ready in its
// pod on the real node, and fails with the pod's state and log otherwise.
func waitControllerPod(ctx context.Context, t *testing.T, cl *localcluster.Cluster, ns string) {
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
			if p.Spec.NodeName == localcluster.NodeName && podReady(p) {
				t.Logf("controller pod %s Ready on %s", p.Name, p.Spec.NodeName)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		state := "no pod"
		if last != nil {
			state = podState(last)
		}
		logs, _ := filepath.Glob(filepath.Join(localcluster.PodLogsDir(cl.Dir), ns+"_*", "*", "*.log"))
		var tail string
		for _, l := range logs {
			tail += l + ":\n" + localcluster.Tail(l, 20) + "\n"
		}
		t.Fatalf("the controller never ran Ready in its pod on the real node: %s\n%s", state, tail)
	}
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
		if err := c.Patch(ctx, u, client.Apply, client.FieldOwner("e2e"), client.ForceOwnership); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
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

// startControllerAsServiceAccount runs the controller binary with a token
// of the installed ServiceAccount and the installed Deployment's arguments
// (ports moved to free local ones).
func startControllerAsServiceAccount(ctx context.Context, t *testing.T, cl *localcluster.Cluster, bin, ns string) {
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
		case len(a) > 23 && a[:23] == "--metrics-bind-address=":
			a = fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics)
		case len(a) > 28 && a[:28] == "--health-probe-bind-address=":
			a = fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe)
		}
		args = append(args, a)
	}
	if _, err := cl.StartProcess(ctx, localcluster.Process{Name: localcluster.Controller, Path: filepath.Join(bin, localcluster.Controller), Args: args}, time.Minute, metrics, probe); err != nil {
		t.Errorf("starting the controller as %s/%s: %v", ns, install.Name, err)
	}
}
