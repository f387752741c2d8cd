package runnerconfig_test

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/capacity"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

func jobPlacement() runnerconfig.JobPlacement {
	return runnerconfig.JobPlacement{
		PodAnnotations: map[string]string{"karpenter.sh/do-not-disrupt": "true", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
		PodLabels:      map[string]string{"runnerfleet.dev/runnerset": "build"},
	}
}

func class() *v1alpha1.RunnerClass {
	return &v1alpha1.RunnerClass{
		ObjectMeta: metav1.ObjectMeta{Name: "eks"},
		Spec: v1alpha1.RunnerClassSpec{
			GitLabURL: "https://gitlab.example.com",
			Defaults: v1alpha1.RunnerClassDefaults{
				JobImage:    "alpine:3.22",
				HelperImage: "registry.example.com/gitlab-runner-helper:x86_64-v19.4.0",
				Cache:       &v1alpha1.CacheSpec{Type: v1alpha1.CacheTypeS3, Bucket: "ci-cache", Region: "eu-west-1", Shared: true},
			},
		},
	}
}

// runnerSets is every shape of RunnerSet the renderer must handle.
func runnerSets() map[string]*v1alpha1.RunnerSet {
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	base := func() *v1alpha1.RunnerSet {
		return &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
	}
	full := base()
	full.Spec.GitLab.URL = "https://gitlab.team-a.example.com"
	full.Spec.Managers = v1alpha1.ManagerSpec{Concurrent: 40, CheckInterval: &metav1.Duration{Duration: 10 * time.Second}}
	full.Spec.Jobs = v1alpha1.JobSpec{
		Image: "golang:1.27", Privileged: true,
		Resources: v1alpha1.JobResources{
			Build:   v1alpha1.ContainerResources{CPURequest: q("1"), CPULimit: q("2"), MemoryRequest: q("2Gi"), MemoryLimit: q("4Gi")},
			Helper:  v1alpha1.ContainerResources{CPURequest: q("100m"), MemoryRequest: q("128Mi")},
			Service: v1alpha1.ContainerResources{CPULimit: q("500m"), MemoryLimit: q("1Gi")},
		},
	}
	gcs := base()
	gcs.Spec.Cache = &v1alpha1.CacheSpec{Type: v1alpha1.CacheTypeGCS, Bucket: "gke-cache", Path: "custom"}
	return map[string]*v1alpha1.RunnerSet{"defaults": base(), "everything set": full, "gcs cache": gcs}
}

func TestEveryRenderedConfigIsAcceptedByGitLabRunnersOwnStructs(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, rs := range runnerSets() {
		t.Run(name, func(t *testing.T) {
			place := jobPlacement()
			place.NodeSelector = map[string]string{"runnerfleet.dev/tag": "team-a", "kubernetes.io/arch": "amd64"}
			place.NodeTolerations = map[string]string{"runnerfleet.dev/tag=team-a": "NoSchedule"}
			place.NodeRequirements = []runnerconfig.NodeRequirement{
				{Key: "karpenter.sh/capacity-type", Operator: "In", Values: []string{"spot", "on-demand"}},
				{Key: "kubernetes.io/arch", Operator: "In", Values: []string{"amd64"}},
			}
			out, err := runnerconfig.Render(runnerconfig.ForRunnerSet(rs, class(), place))
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Check(out); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

func TestForRunnerSetMapsTheSpec(t *testing.T) {
	rs := runnerSets()["everything set"]
	place := runnerconfig.JobPlacement{
		NodeSelector:    map[string]string{"runnerfleet.dev/tag": "team-a"},
		NodeTolerations: map[string]string{"runnerfleet.dev/tag=team-a": "NoSchedule"},
		PodAnnotations:  map[string]string{"karpenter.sh/do-not-disrupt": "true"},
	}
	c := runnerconfig.ForRunnerSet(rs, class(), place)
	r := c.Runners[0]
	k := r.Kubernetes
	checks := map[string][2]any{
		"concurrent":          {c.Concurrent, 40},
		"check_interval":      {c.CheckInterval, 10},
		"limit":               {r.Limit, 40},
		"url (spec wins)":     {r.URL, "https://gitlab.team-a.example.com"},
		"token placeholder":   {r.Token, runnerconfig.TokenPlaceholder},
		"executor":            {r.Executor, "kubernetes"},
		"jobs namespace":      {k.Namespace, "team-a-build-j6"},
		"image (spec wins)":   {k.Image, "golang:1.27"},
		"helper image":        {k.HelperImage, "registry.example.com/gitlab-runner-helper:x86_64-v19.4.0"},
		"privileged":          {*k.Privileged, true},
		"service account":     {k.ServiceAccount, ""}, // no identity: the jobs namespace's default
		"no API token":        {*k.AutomountServiceAccountToken, false},
		"cpu request":         {k.CPURequest, "1"},
		"memory limit":        {k.MemoryLimit, "4Gi"},
		"helper memory":       {k.HelperMemoryRequest, "128Mi"},
		"service cpu limit":   {k.ServiceCPULimit, "500m"},
		"node selector":       {k.NodeSelector["runnerfleet.dev/tag"], "team-a"},
		"toleration":          {k.NodeTolerations["runnerfleet.dev/tag=team-a"], "NoSchedule"},
		"do-not-disrupt":      {k.PodAnnotations["karpenter.sh/do-not-disrupt"], "true"},
		"cache from class":    {r.Cache.S3.BucketName, "ci-cache"},
		"cache path":          {r.Cache.Path, "team-a"},
		"cache iam":           {r.Cache.S3.AuthenticationType, "iam"},
		"metrics listener":    {c.ListenAddress, ":9252"},
		"forced stop":         {c.ShutdownTimeout, runnerconfig.ForcedShutdownTimeout},
		"json logs":           {c.LogFormat, "json"},
		"request concurrency": {r.RequestConcurrency, 10},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s: got %v, want %v", name, c[0], c[1])
		}
	}
}

func TestDefaultsComeFromTheClass(t *testing.T) {
	c := runnerconfig.ForRunnerSet(runnerSets()["defaults"], class(), runnerconfig.JobPlacement{})
	k := c.Runners[0].Kubernetes
	if c.Concurrent != 10 || c.CheckInterval != 3 || k.Image != "alpine:3.22" || k.Privileged != nil ||
		c.Runners[0].URL != "https://gitlab.example.com" || !c.Runners[0].Cache.Shared {
		t.Errorf("defaults: %+v %+v", c, k)
	}
	gcs := runnerconfig.ForRunnerSet(runnerSets()["gcs cache"], class(), runnerconfig.JobPlacement{})
	if ch := gcs.Runners[0].Cache; ch.Type != "gcs" || ch.GCS.BucketName != "gke-cache" || ch.S3 != nil || ch.Path != "custom" {
		t.Errorf("gcs cache: %+v", ch)
	}
}

func TestRenderIsDeterministicAndRoundTrips(t *testing.T) {
	rs := runnerSets()["everything set"]
	place := jobPlacement()
	place.NodeSelector = map[string]string{"b": "2", "a": "1", "c": "3"}
	c := runnerconfig.ForRunnerSet(rs, class(), place)
	first, err := runnerconfig.Render(c)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, _ := runnerconfig.Render(runnerconfig.ForRunnerSet(rs, class(), place))
		if !bytes.Equal(first, again) {
			t.Fatal("two renderings of the same config differ")
		}
	}
	var back runnerconfig.Config
	md, err := toml.Decode(string(first), &back)
	if err != nil {
		t.Fatal(err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		t.Fatalf("keys rendered but not decodable: %v", u)
	}
	if back.Runners[0].Kubernetes.NodeSelector["c"] != "3" || back.Concurrent != 40 {
		t.Fatalf("round trip lost data: %+v", back)
	}
}

func TestRenderRefusesAConfigGitLabRunnerCouldNotUse(t *testing.T) {
	for name, c := range map[string]runnerconfig.Config{
		"no concurrency": {Runners: []runnerconfig.Runner{{Name: "x"}}},
		"no runners":     {Concurrent: 1},
	} {
		_, err := runnerconfig.Render(c)
		if err == nil || !strings.Contains(err.Error(), "config.toml") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// fill sets every field of v, recursively, to a non-zero value.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		val := reflect.New(v.Type().Elem()).Elem()
		fill(val)
		v.SetMapIndex(reflect.ValueOf("k"), val)
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

// Every key the renderer can write, not only those today's RunnerSets use,
// must be one gitlab-runner knows, with the type it expects.
func TestEveryKeyTheRendererCanWriteIsKnownToGitLabRunner(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var c runnerconfig.Config
	fill(reflect.ValueOf(&c).Elem())
	c.Runners[0].Override = "" // not a key: merged into the table, checked on its own
	out, err := runnerconfig.Render(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Check(out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// Job pods run as the RunnerSet's job ServiceAccount only when a cloud
// identity binds to it by name; otherwise as the jobs namespace's default,
// which the controller need not write. Either way config.toml turns the
// pod's API token off, in the key gitlab-runner's executor copies into the
// pod (automountServiceAccountToken): the default ServiceAccount would
// mount one. The rendered file passes gitlab-runner's own structs.
func TestJobPodsGetNoAPITokenWhicheverServiceAccountTheyRunAs(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		identity *v1alpha1.JobIdentity
		sa       string
	}{
		"no cloud identity": {nil, ""},
		"an IAM role":       {&v1alpha1.JobIdentity{AWSRoleARN: "arn:aws:iam::123456789012:role/ci"}, "build-job"},
		"a GCP account":     {&v1alpha1.JobIdentity{GCPServiceAccount: "ci@p.iam.gserviceaccount.com"}, "build-job"},
	} {
		t.Run(name, func(t *testing.T) {
			rs := runnerSets()["defaults"].DeepCopy()
			rs.Spec.Jobs.Identity = tc.identity
			out, err := runnerconfig.Render(runnerconfig.ForRunnerSet(rs, class(), jobPlacement()))
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Check(out); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var got struct {
				Runners []struct {
					Kubernetes map[string]any `toml:"kubernetes"`
				} `toml:"runners"`
			}
			if _, err := toml.Decode(string(out), &got); err != nil {
				t.Fatal(err)
			}
			k := got.Runners[0].Kubernetes
			if v, ok := k["automount_service_account_token"]; !ok || v != false {
				t.Errorf("automount_service_account_token = %v (set: %v), want false: a job pod would get an API token\n%s", v, ok, out)
			}
			if sa, _ := k["service_account"].(string); sa != tc.sa {
				t.Errorf("service_account = %q, want %q", sa, tc.sa)
			}
		})
	}
}

// A [[runners.monitoring.job_queuing_durations]] the renderer writes is one
// gitlab-runner's structs know and its values pass gitlab-runner's parsers;
// an entry with no threshold (which gitlab-runner would never count by) is
// refused, naming it.
func TestRenderedJobQueuingDurationsPassTheOracle(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	values, err := schema.Values()
	if err != nil {
		t.Fatal(err)
	}
	render := func(d runnerconfig.JobQueuingDuration) []byte {
		t.Helper()
		c := runnerconfig.ForRunnerSet(runnerSets()["defaults"], class(), jobPlacement())
		c.Runners[0].Monitoring = &runnerconfig.Monitoring{JobQueuingDurations: []runnerconfig.JobQueuingDuration{d}}
		out, err := runnerconfig.Render(c)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := render(runnerconfig.JobQueuingDuration{
		Periods: []string{"* * 9-17 * * mon-fri *"}, Timezone: "Europe/Berlin",
		Threshold: runnerconfig.Duration(5 * time.Minute), JobsRunningForProject: "^[0-3]$",
	})
	if !bytes.Contains(out, []byte("[[runners.monitoring.job_queuing_durations]]")) || !bytes.Contains(out, []byte(`threshold = "5m0s"`)) {
		t.Fatalf("rendered:\n%s", out)
	}
	if err := schema.Check(out); err != nil {
		t.Errorf("keys: %v\n%s", err, out)
	}
	if err := values.Check(out); err != nil {
		t.Errorf("values: %v\n%s", err, out)
	}
	bad := render(runnerconfig.JobQueuingDuration{Periods: []string{"* * * * * * *"}})
	ps := oracle.Problems(values.Check(bad))
	if len(ps) != 1 || ps[0].Path != "runners[0].monitoring.job_queuing_durations[0].threshold" {
		t.Errorf("no threshold: %v, want one problem at its threshold\n%s", ps, bad)
	}
}

// A placement's node requirements become the job pods' required node
// affinity, in the one term gitlab-runner's kubernetes executor copies into
// the pod; without requirements config.toml has no affinity table.
func TestNodeRequirementsBecomeTheJobPodsRequiredNodeAffinity(t *testing.T) {
	place := jobPlacement()
	place.NodeRequirements = []runnerconfig.NodeRequirement{
		{Key: "karpenter.sh/nodepool", Operator: "In", Values: []string{"rfclass-eks"}},
		{Key: "kubernetes.io/arch", Operator: "In", Values: []string{"amd64", "arm64"}},
	}
	rs := runnerSets()["defaults"]
	out, err := runnerconfig.Render(runnerconfig.ForRunnerSet(rs, class(), place))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Runners []struct {
			Kubernetes struct {
				Affinity struct {
					NodeAffinity struct {
						Required struct {
							Terms []struct {
								MatchExpressions []struct {
									Key, Operator string
									Values        []string
								} `toml:"match_expressions"`
							} `toml:"node_selector_terms"`
						} `toml:"required_during_scheduling_ignored_during_execution"`
					} `toml:"node_affinity"`
				} `toml:"affinity"`
			} `toml:"kubernetes"`
		} `toml:"runners"`
	}
	if _, err := toml.Decode(string(out), &got); err != nil {
		t.Fatal(err)
	}
	terms := got.Runners[0].Kubernetes.Affinity.NodeAffinity.Required.Terms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 ||
		terms[0].MatchExpressions[1].Key != "kubernetes.io/arch" || terms[0].MatchExpressions[1].Operator != "In" ||
		!reflect.DeepEqual(terms[0].MatchExpressions[1].Values, []string{"amd64", "arm64"}) {
		t.Errorf("affinity %+v from:\n%s", terms, out)
	}
	out, err = runnerconfig.Render(runnerconfig.ForRunnerSet(rs, class(), jobPlacement()))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "affinity") {
		t.Errorf("a placement without requirements renders an affinity:\n%s", out)
	}
}

// The [[runners]] limit of a tag with spec.capacity.limits is the jobs that
// fit them per manager (capacity.JobsPerManager), which gitlab-runner's
// own rule for limit accepts (the oracle: at least 1, since 0 is no limit
// to acquireBuild): the managers together never take more jobs than fit,
// and the jobs beyond wait in GitLab's queue. request_concurrency never
// exceeds it. Negative control: the same tag rendered without the derived
// limit takes concurrent jobs per manager, more than fit.
func TestATagsLimitsBecomeEachManagersRunnerLimit(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	values, err := schema.Values()
	if err != nil {
		t.Fatal(err)
	}
	kwok := &v1alpha1.RunnerClass{ObjectMeta: metav1.ObjectMeta{Name: "kwok"}, Spec: v1alpha1.RunnerClassSpec{Provider: v1alpha1.CapacityProviderKWOK}}
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	for _, c := range []struct {
		name     string
		limit    string
		replicas int32
		fit      int
		want     int
	}{
		{"one manager", "8", 1, 4, 4},
		{"three managers", "14", 3, 7, 2},
		{"one job each", "4", 2, 2, 1},
		{"more than concurrent", "100", 1, 50, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
			rs.Spec.Managers.Replicas = ptr.To(c.replicas)
			rs.Spec.Jobs.Resources.Build.CPURequest = q("1500m")
			rs.Spec.Jobs.Resources.Helper.CPURequest = q("500m")
			rs.Spec.Capacity.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(c.limit)}
			capa, err := capacity.For(rs, kwok, v1alpha1.Effective(rs, kwok))
			if err != nil {
				t.Fatal(err)
			}
			out, err := runnerconfig.Render(runnerconfig.ForRunnerSet(rs, kwok, capa.Placement))
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Check(out); err != nil {
				t.Errorf("keys: %v", err)
			}
			if err := values.Check(out); err != nil {
				t.Errorf("values: %v", err)
			}
			var got struct {
				Runners []struct {
					Limit              *int `toml:"limit"`
					RequestConcurrency int  `toml:"request_concurrency"`
				} `toml:"runners"`
			}
			if _, err := toml.Decode(string(out), &got); err != nil {
				t.Fatal(err)
			}
			r := got.Runners[0]
			if r.Limit == nil || *r.Limit != c.want {
				t.Fatalf("limit %v, want %d:\n%s", r.Limit, c.want, out)
			}
			if int(c.replicas)**r.Limit > c.fit {
				t.Errorf("%d managers × limit %d = more than the %d jobs that fit", c.replicas, *r.Limit, c.fit)
			}
			if r.RequestConcurrency > *r.Limit {
				t.Errorf("request_concurrency %d above limit %d", r.RequestConcurrency, *r.Limit)
			}
			// Negative control: without the derived limit the managers
			// take more jobs than fit.
			plain, err := runnerconfig.Render(runnerconfig.ForRunnerSet(rs, kwok, runnerconfig.JobPlacement{}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := toml.Decode(string(plain), &got); err != nil {
				t.Fatal(err)
			}
			if n := int(c.replicas) * *got.Runners[0].Limit; n <= c.fit && c.want < 10 {
				t.Errorf("the control takes %d jobs at once, no more than the %d that fit: the test proves nothing", n, c.fit)
			}
		})
	}
}
