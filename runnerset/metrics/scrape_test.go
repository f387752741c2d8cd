package metrics_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/runnerfleet/runnerfleet/internal/promtool"
	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/controller"
	runnertoken "github.com/runnerfleet/runnerfleet/runnerset/controller/token"
	"github.com/runnerfleet/runnerfleet/runnerset/install"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
	"github.com/runnerfleet/runnerfleet/runnerset/resources"
	"github.com/runnerfleet/runnerfleet/runnerset/testenv"
)

const (
	pat     = "glpat-metrics-test-000000000"
	groupID = int64(42)
	token   = "glrt-metrics_T0ken-000000"
)

// The controller, as cmd/runnerset-controller wires it, serves its metrics
// over TLS to a scraper the API server authenticates and authorizes; what it
// serves passes promtool check metrics and says what the fleet is.
func TestALiveScrapeOfTheControllerPassesPromtoolAndTellsTheFleet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ww, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = testenv.SimulateDeployments(ctx, ww, nil) }()

	srv := gitlabserver.New()
	defer srv.Close()
	srv.AddUser(pat, gitlabserver.User{Scopes: []string{gitlabserver.ScopeCreateRunner, gitlabserver.ScopeManageRunner}, Groups: []int64{groupID}})
	srv.SetTokenLifetime(30 * 24 * time.Hour)

	addr := freeAddr(t)
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Cache:      controller.CacheOptions(env.Scheme, mapper),
		Metrics:    metrics.Serving{BindAddress: addr, Secure: true}.Options(),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := metrics.Register(mgr, controller.CapacityKinds()); err != nil {
		t.Fatal(err)
	}
	controllers := controller.NewControllers(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(controller.Name))
	if err := controller.Register(ctx, mgr, controllers...); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	c := env.Client
	ns := "team-a"
	mustT(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	mustT(t, c.Create(ctx, &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "local"},
		Spec:       v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK, GitLabURL: srv.URL()},
	}))
	expires := time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)
	mustT(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stored", Annotations: map[string]string{runnertoken.AnnotationTokenExpiresAt: expires.Format(time.RFC3339)}},
		Data:       map[string][]byte{"token": []byte(token)},
	}))
	mustT(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gitlab-api"}, Data: map[string][]byte{"token": []byte(pat)}}))
	for name, g := range map[string]v1alpha1.GitLabSpec{
		"stored":  {TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "stored"}},
		"created": {Runner: &v1alpha1.RunnerRegistration{Type: v1alpha1.RunnerTypeGroup, GroupID: ptr.To(groupID), APITokenSecretRef: v1alpha1.SecretKeyRef{Name: "gitlab-api"}}},
		"missing": {TokenSecretRef: &v1alpha1.SecretKeyRef{Name: "nowhere"}},
	} {
		mustT(t, c.Create(ctx, &v1alpha1.RunnerSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       v1alpha1.RunnerSetSpec{ClassName: "local", Tags: []string{name}, GitLab: g},
		}))
	}
	// A manager pod asked to stop an hour from now: a drain in progress.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stored-manager-x", Labels: map[string]string{
			resources.LabelManagedBy: resources.ManagedBy, resources.LabelComponent: resources.ComponentManager, resources.LabelRunnerSet: "stored",
		}},
		Spec: corev1.PodSpec{NodeName: "node-a", TerminationGracePeriodSeconds: ptr.To[int64](3600), Containers: []corev1.Container{{Name: "manager", Image: "runner"}}},
	}
	mustT(t, c.Create(ctx, pod))
	mustT(t, c.Delete(ctx, pod))
	// A spot node of the stored runner's NodePool, as Karpenter labels it.
	mustT(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "job-node-1", Labels: map[string]string{
		karpv1.NodePoolLabelKey: naming.For(ns, "stored").Capacity(), karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeSpot, corev1.LabelInstanceTypeStable: "c-4x-amd64-linux",
	}}}))

	// Scrapers: one bound to the install's metrics reader role, one not.
	reader := install.MetricsReaderRole(install.Defaults())
	reader.ResourceVersion = ""
	mustT(t, c.Create(ctx, reader))
	mustT(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}))
	for _, sa := range []string{"prometheus", "stranger"} {
		mustT(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: sa}}))
	}
	mustT(t, c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reads-runnerfleet"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: install.MetricsReader},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}},
	}))
	cs := kubernetes.NewForConfigOrDie(env.Config)
	tokenOf := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	promToken, strangerToken := tokenOf("prometheus"), tokenOf("stranger")

	// Wait until the fleet has settled: two Ready, one refused, one drain.
	var body []byte
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, b := scrape(t, addr, promToken)
		if code == http.StatusOK {
			body = b
			fams = parse(t, b)
			if value(fams, metrics.RunnerSetReady, map[string]string{"runnerset": "created"}) == 1 &&
				value(fams, metrics.RunnerSetReady, map[string]string{"runnerset": "stored"}) == 1 &&
				value(fams, metrics.TokenExpiry, map[string]string{"runnerset": "created"}) > 0 &&
				value(fams, metrics.CapacityObjects, map[string]string{"kind": "KWOKNodeClass"}) == 1 && // the class's, shared by both
				value(fams, metrics.RunnerSetNodes, map[string]string{"runnerset": "stored"}) == 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not settle in the metrics (last scrape %d):\n%s", code, ours(b))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// promtool's lint of the exposition: names, units, help, counters' _total.
	if out, err := promtool.Run("", body, "check", "metrics"); err != nil {
		t.Errorf("promtool check metrics refused the live scrape: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{metrics.RunnerSetReady, map[string]string{"namespace": ns, "runnerset": "missing", "class": "local"}, 0},
		{metrics.RunnerSets, map[string]string{"condition": v1alpha1.ConditionReady, "status": "True", "reason": v1alpha1.ReasonReconciled}, 2},
		{metrics.RunnerSets, map[string]string{"condition": v1alpha1.ConditionRunnerRegistered, "status": "False", "reason": v1alpha1.ReasonTokenSecretNotFound}, 1},
		{metrics.TokenExpiry, map[string]string{"runnerset": "stored"}, float64(expires.Unix())},
		{metrics.DrainingManagerPods, map[string]string{"namespace": ns, "runnerset": "stored"}, 1},
		{metrics.RunnerSetsDeleting, nil, 0},
		{metrics.GitLabRequestsTotal, map[string]string{"endpoint": "/user/runners", "method": "POST", "code": "201"}, 1},
		{metrics.CapacityObjects, map[string]string{"kind": "NodePool"}, 2},
		{metrics.ReconcileErrorsTotal, map[string]string{"step": v1alpha1.ConditionCapacityReady}, 0},
		{metrics.RunnerSetNodes, map[string]string{"namespace": ns, "runnerset": "stored", "capacity_type": "spot", "instance_type": "c-4x-amd64-linux"}, 1},
	} {
		if got := value(fams, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	created := value(fams, metrics.TokenExpiry, map[string]string{"runnerset": "created"})
	if d := time.Until(time.Unix(int64(created), 0)); d < 29*24*time.Hour || d > 31*24*time.Hour {
		t.Errorf("the created runner's token expires in %v, want GitLab's 30 days", d)
	}
	deadlineTS := value(fams, metrics.DrainDeadline, map[string]string{"runnerset": "stored"})
	if d := time.Until(time.Unix(int64(deadlineTS), 0)); d < 50*time.Minute || d > time.Hour+time.Minute {
		t.Errorf("drain deadline in %v, want the pod's grace period of an hour", d)
	}
	if strings.Contains(string(body), token) || strings.Contains(string(body), pat) {
		t.Error("a token is in the metrics")
	}

	// Who may scrape: no token, and a token without the reader role, are refused.
	if code, _ := scrape(t, addr, ""); code != http.StatusUnauthorized {
		t.Errorf("a scrape without a token got %d, want 401", code)
	}
	if code, _ := scrape(t, addr, strangerToken); code != http.StatusForbidden {
		t.Errorf("a scrape by a ServiceAccount without %s got %d, want 403", install.MetricsReader, code)
	}
	// And plain HTTP gets no metrics.
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("metrics served over plain HTTP")
		}
	}
}

// The negative control of the lint: promtool refuses what breaks the
// conventions the live scrape is held to.
func TestPromtoolRefusesACounterWithoutTotal(t *testing.T) {
	bad := "# HELP runnerfleet_errors Errors.\n# TYPE runnerfleet_errors counter\nrunnerfleet_errors 1\n"
	if out, err := promtool.Run("", []byte(bad), "check", "metrics"); err == nil {
		t.Errorf("promtool accepted a counter without _total:\n%s", out)
	}
}

func scrape(t *testing.T, addr, bearer string) (int, []byte) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the controller's self-signed certificate
	req, _ := http.NewRequest(http.MethodGet, "https://"+addr+install.MetricsPath, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func parse(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return fams
}

// value is the value of the one series of name whose labels include want;
// -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && have[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		}
	}
	return -1
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func mustT(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// ours are the runnerfleet_ lines of a scrape.
func ours(b []byte) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, metrics.Prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
