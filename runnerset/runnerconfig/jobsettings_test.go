package runnerconfig_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig/oracle"
)

// jobsRunnerSet sets every job setting.
func jobsRunnerSet() *v1alpha1.RunnerSet {
	rs := &v1alpha1.RunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "build"}}
	mount := func(p string) v1alpha1.VolumeMount { return v1alpha1.VolumeMount{MountPath: p} }
	rs.Spec.Jobs = v1alpha1.JobSpec{
		PodAnnotations:   map[string]string{"team.example.com/cost-center": "42"},
		PodLabels:        map[string]string{"team": "a"},
		ImagePullSecrets: []string{"regcred"},
		Environment:      []v1alpha1.EnvVar{{Name: "GOFLAGS", Value: "-mod=mod"}, {Name: "EMPTY"}},
		FeatureFlags:     map[string]bool{"FF_PRINT_POD_EVENTS": true, "FF_USE_FASTZIP": false},
		HelperImage:      "registry.example.com/gitlab-runner-helper:team",
		PollTimeout:      &metav1.Duration{Duration: 10 * time.Minute},
		Services: []v1alpha1.JobService{
			{Name: "docker:27-dind", Alias: "docker", Command: []string{"--tls=false"}},
			{Name: "postgres:17", Entrypoint: []string{"docker-entrypoint.sh"}},
		},
		Volumes: v1alpha1.JobVolumes{
			ConfigMaps: []v1alpha1.ObjectVolume{{Name: "ca", VolumeMount: v1alpha1.VolumeMount{MountPath: "/etc/ca", ReadOnly: true, SubPath: "ca.pem"}}},
			Secrets:    []v1alpha1.ObjectVolume{{Name: "npmrc", VolumeMount: mount("/root/.npmrc")}},
			EmptyDirs:  []v1alpha1.EmptyDirVolume{{Name: "scratch", Medium: "Memory", SizeLimit: ptr.To(resource.MustParse("1Gi")), VolumeMount: mount("/scratch")}},
			PVCs:       []v1alpha1.ObjectVolume{{Name: "go-cache", VolumeMount: mount("/go/pkg/mod")}},
			HostPaths:  []v1alpha1.HostPathVolume{{Name: "ccache", HostPath: "/var/cache/ci//ccache/", VolumeMount: mount("/ccache")}},
		},
		ConfigOverride: "pre_build_script = \"echo hi\"\n[kubernetes]\npoll_interval = 5\ncleanup_grace_period_seconds = 30\n[kubernetes.pod_security_context]\nrun_as_non_root = true\n",
	}
	return rs
}

func TestEveryJobSettingRendersAsGitLabRunnerReadsIt(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, err := runnerconfig.Render(runnerconfig.ForRunnerSet(jobsRunnerSet(), class(), jobPlacement()))
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Check(out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	values, err := schema.Values()
	if err != nil {
		t.Fatal(err)
	}
	if err := values.Check(out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Read back as gitlab-runner's own key names have them.
	var doc struct {
		Runners []struct {
			Environment    []string        `toml:"environment"`
			FeatureFlags   map[string]bool `toml:"feature_flags"`
			PreBuildScript string          `toml:"pre_build_script"`
			Token          string          `toml:"token"`
			Kubernetes     struct {
				Namespace        string            `toml:"namespace"`
				HelperImage      string            `toml:"helper_image"`
				PodAnnotations   map[string]string `toml:"pod_annotations"`
				PodLabels        map[string]string `toml:"pod_labels"`
				ImagePullSecrets []string          `toml:"image_pull_secrets"`
				PollTimeout      int               `toml:"poll_timeout"`
				PollInterval     int               `toml:"poll_interval"`
				CleanupGrace     int64             `toml:"cleanup_grace_period_seconds"`
				PodSecurity      struct {
					RunAsNonRoot bool `toml:"run_as_non_root"`
				} `toml:"pod_security_context"`
				Services []struct {
					Name, Alias         string
					Command, Entrypoint []string
				} `toml:"services"`
				Volumes struct {
					HostPath []struct {
						Name      string `toml:"name"`
						HostPath  string `toml:"host_path"`
						MountPath string `toml:"mount_path"`
					} `toml:"host_path"`
					PVC       []struct{ Name string } `toml:"pvc"`
					ConfigMap []struct {
						Name     string `toml:"name"`
						ReadOnly bool   `toml:"read_only"`
						SubPath  string `toml:"sub_path"`
					} `toml:"config_map"`
					Secret   []struct{ Name string } `toml:"secret"`
					EmptyDir []struct {
						Name      string `toml:"name"`
						Medium    string `toml:"medium"`
						SizeLimit string `toml:"size_limit"`
					} `toml:"empty_dir"`
				} `toml:"volumes"`
			} `toml:"kubernetes"`
		} `toml:"runners"`
	}
	if _, err := toml.Decode(string(out), &doc); err != nil {
		t.Fatal(err)
	}
	r := doc.Runners[0]
	k := r.Kubernetes
	v := k.Volumes
	checks := map[string][2]any{
		"environment":               {strings.Join(r.Environment, " "), "GOFLAGS=-mod=mod EMPTY="},
		"feature flag on":           {r.FeatureFlags["FF_PRINT_POD_EVENTS"], true},
		"feature flag off":          {len(r.FeatureFlags), 2},
		"override: [[runners]] key": {r.PreBuildScript, "echo hi"},
		"override: table merged":    {k.PollInterval, 5},
		"override: second key":      {k.CleanupGrace, int64(30)},
		"override: nested table":    {k.PodSecurity.RunAsNonRoot, true},
		"namespace kept":            {k.Namespace, "team-a-build-j6"},
		"token kept":                {r.Token, runnerconfig.TokenPlaceholder},
		"helper image (spec wins)":  {k.HelperImage, "registry.example.com/gitlab-runner-helper:team"},
		"team annotation":           {k.PodAnnotations["team.example.com/cost-center"], "42"},
		"do-not-disrupt kept":       {k.PodAnnotations["karpenter.sh/do-not-disrupt"], "true"},
		"team label":                {k.PodLabels["team"], "a"},
		"runnerset label kept":      {k.PodLabels["runnerfleet.dev/runnerset"], "build"},
		"pull secrets":              {strings.Join(k.ImagePullSecrets, ","), "regcred"},
		"poll timeout in seconds":   {k.PollTimeout, 600},
		"services":                  {len(k.Services), 2},
		"service alias":             {k.Services[0].Alias, "docker"},
		"service command":           {strings.Join(k.Services[0].Command, " "), "--tls=false"},
		"service entrypoint":        {strings.Join(k.Services[1].Entrypoint, " "), "docker-entrypoint.sh"},
		"host path, cleaned":        {v.HostPath[0].HostPath, "/var/cache/ci/ccache"},
		"host path mount":           {v.HostPath[0].MountPath, "/ccache"},
		"pvc":                       {v.PVC[0].Name, "go-cache"},
		"config map":                {v.ConfigMap[0].Name + " " + v.ConfigMap[0].SubPath, "ca ca.pem"},
		"config map read-only":      {v.ConfigMap[0].ReadOnly, true},
		"secret":                    {v.Secret[0].Name, "npmrc"},
		"empty dir":                 {v.EmptyDir[0].Medium + " " + v.EmptyDir[0].SizeLimit, "Memory 1Gi"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s: got %v, want %v", name, c[0], c[1])
		}
	}
}

// A spec's label or annotation never replaces the placement's.
func TestThePlacementsLabelsAndAnnotationsWin(t *testing.T) {
	rs := jobsRunnerSet()
	rs.Spec.Jobs.PodAnnotations = map[string]string{"karpenter.sh/do-not-disrupt": "false"}
	rs.Spec.Jobs.PodLabels = map[string]string{"runnerfleet.dev/runnerset": "other"}
	k := runnerconfig.ForRunnerSet(rs, class(), jobPlacement()).Runners[0].Kubernetes
	if k.PodAnnotations["karpenter.sh/do-not-disrupt"] != "true" || k.PodLabels["runnerfleet.dev/runnerset"] != "build" {
		t.Errorf("the spec replaced the placement: %v %v", k.PodAnnotations, k.PodLabels)
	}
}

func TestCheckJobSettingsRefusesWhatGitLabRunnerWouldNotReadOrRunnerfleetOwns(t *testing.T) {
	cases := []struct {
		name   string
		change func(*v1alpha1.JobSpec)
		reason string
		says   []string
	}{
		{"unknown feature flag", func(j *v1alpha1.JobSpec) { j.FeatureFlags = map[string]bool{"FF_PRINT_POD_EVENT": true} },
			v1alpha1.ReasonUnknownFeatureFlag, []string{"spec.jobs.featureFlags", `"FF_PRINT_POD_EVENT"`, `did you mean "FF_PRINT_POD_EVENTS"?`, "19.4"}},
		{"override: not TOML", func(j *v1alpha1.JobSpec) { j.ConfigOverride = "[kubernetes\npoll_interval = 5" },
			v1alpha1.ReasonConfigOverrideInvalid, []string{"spec.jobs.configOverride", "not valid TOML"}},
		{"override: unknown key", func(j *v1alpha1.JobSpec) { j.ConfigOverride = "[kubernetes]\npoll_intervall = 5\n" },
			v1alpha1.ReasonConfigOverrideUnknownKey, []string{"spec.jobs.configOverride: kubernetes.poll_intervall", `did you mean "poll_interval"?`}},
		{"override: unknown [[runners]] key", func(j *v1alpha1.JobSpec) { j.ConfigOverride = "pre_build_scripts = \"x\"\n" },
			v1alpha1.ReasonConfigOverrideUnknownKey, []string{"spec.jobs.configOverride: pre_build_scripts"}},
		{"override: wrong type", func(j *v1alpha1.JobSpec) { j.ConfigOverride = "[kubernetes]\npoll_interval = \"5s\"\n" },
			v1alpha1.ReasonConfigOverrideWrongType, []string{"spec.jobs.configOverride: kubernetes.poll_interval", "want integer", `got string "5s"`}},
		{"override: wrong type of a table", func(j *v1alpha1.JobSpec) { j.ConfigOverride = "kubernetes = 3\n" },
			v1alpha1.ReasonConfigOverrideWrongType, []string{"spec.jobs.configOverride: kubernetes", "want table"}},
	}
	owned := map[string]string{
		"token":                      "token = \"glrt-someone-elses\"\n",
		"TOKEN, as toml matches it":  "TOKEN = \"glrt-someone-elses\"\n",
		"url":                        "url = \"https://gitlab.evil.example.com\"\n",
		"executor":                   "executor = \"shell\"\n",
		"limit":                      "limit = 1000\n",
		"namespace":                  "[kubernetes]\nnamespace = \"team-b\"\n",
		"namespace as a dotted key":  "kubernetes.namespace = \"team-b\"\n",
		"namespace, quoted key":      "[\"kubernetes\"]\n\"namespace\" = \"team-b\"\n",
		"namespace overwrite":        "[kubernetes]\nnamespace_overwrite_allowed = \".*\"\n",
		"service account":            "[kubernetes]\nservice_account = \"default\"\n",
		"service account overwrite":  "[kubernetes]\nservice_account_overwrite_allowed = \".*\"\n",
		"token automount":            "[kubernetes]\nautomount_service_account_token = true\n",
		"bearer token":               "[kubernetes]\nbearer_token = \"x\"\n",
		"api host":                   "[kubernetes]\nhost = \"https://10.0.0.1\"\n",
		"privileged":                 "[kubernetes]\nprivileged = true\n",
		"privilege escalation":       "[kubernetes]\nallow_privilege_escalation = true\n",
		"cap_add":                    "[kubernetes]\ncap_add = [\"SYS_ADMIN\"]\n",
		"container privileged":       "[kubernetes.build_container_security_context]\nprivileged = true\n",
		"service capabilities":       "[kubernetes.service_container_security_context.capabilities]\nadd = [\"NET_ADMIN\"]\n",
		"pod_spec":                   "[[kubernetes.pod_spec]]\nname = \"x\"\npatch = '[{\"op\": \"add\", \"path\": \"/hostPID\", \"value\": true}]'\npatch_type = \"json\"\n",
		"host_path volume":           "[[kubernetes.volumes.host_path]]\nname = \"root\"\nmount_path = \"/host\"\nhost_path = \"/\"\n",
		"node selector":              "[kubernetes.node_selector]\n\"runnerfleet.dev/tag\" = \"team-b\"\n",
		"tolerations":                "[kubernetes.node_tolerations]\n\"runnerfleet.dev/tag=team-b\" = \"NoSchedule\"\n",
		"affinity":                   "[kubernetes.affinity]\n",
		"priority class":             "[kubernetes]\npriority_class_name = \"system-cluster-critical\"\n",
		"annotation overwrite":       "[kubernetes]\npod_annotations_overwrite_allowed = \".*\"\n",
		"cache":                      "[cache]\nType = \"s3\"\n",
		"environment":                "environment = [\"A=b\"]\n",
		"feature flags":              "[feature_flags]\nFF_PRINT_POD_EVENTS = true\n",
		"docker executor's settings": "[docker]\nprivileged = true\n",
		"helper image":               "[kubernetes]\nhelper_image = \"evil/helper\"\n",
		"cpu limit":                  "[kubernetes]\ncpu_limit = \"64\"\n",
	}
	for name, fragment := range owned {
		cases = append(cases, struct {
			name   string
			change func(*v1alpha1.JobSpec)
			reason string
			says   []string
		}{"override owns " + name, func(j *v1alpha1.JobSpec) { j.ConfigOverride = fragment },
			v1alpha1.ReasonConfigOverrideOwnedKey, []string{"spec.jobs.configOverride", "is runnerfleet's to set", "remove it from the override"}})
	}
	cases = append(cases,
		struct {
			name   string
			change func(*v1alpha1.JobSpec)
			reason string
			says   []string
		}{"a label value the API server refuses", func(j *v1alpha1.JobSpec) { j.PodLabels = map[string]string{"team": "a b"} },
			v1alpha1.ReasonJobSettingInvalid, []string{"spec.jobs.podLabels", `"a b"`}},
		struct {
			name   string
			change func(*v1alpha1.JobSpec)
			reason string
			says   []string
		}{"an annotation key the API server refuses", func(j *v1alpha1.JobSpec) { j.PodAnnotations = map[string]string{"no spaces": "x"} },
			v1alpha1.ReasonJobSettingInvalid, []string{"spec.jobs.podAnnotations", `"no spaces"`}},
	)
	type tc = struct {
		name   string
		change func(*v1alpha1.JobSpec)
		reason string
		says   []string
	}
	cases = append(cases,
		tc{"a volume named as the executor's own", func(j *v1alpha1.JobSpec) { j.Volumes.EmptyDirs[0].Name = "repo" },
			v1alpha1.ReasonJobSettingInvalid, []string{"spec.jobs.volumes.emptyDirs[0].name", `"repo"`, "choose another name"}},
		tc{"two volumes of one name", func(j *v1alpha1.JobSpec) { j.Volumes.PVCs[0].Name = "ca" },
			v1alpha1.ReasonJobSettingInvalid, []string{"spec.jobs.volumes.pvcs[0].name", "spec.jobs.volumes.configMaps[0]"}},
		tc{"two volumes at one path", func(j *v1alpha1.JobSpec) { j.Volumes.Secrets[0].MountPath = "/scratch/" },
			v1alpha1.ReasonJobSettingInvalid, []string{"spec.jobs.volumes.emptyDirs[0].mountPath", "spec.jobs.volumes.secrets[0]"}},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := jobsRunnerSet()
			c.change(&rs.Spec.Jobs)
			f := runnerconfig.CheckJobSettings(rs, class())
			if f == nil || f.Reason != c.reason {
				t.Fatalf("CheckJobSettings = %+v, want reason %s", f, c.reason)
			}
			for _, s := range c.says {
				if !strings.Contains(f.Message, s) {
					t.Errorf("message %q does not say %q", f.Message, s)
				}
			}
		})
	}
	if f := runnerconfig.CheckJobSettings(jobsRunnerSet(), class()); f != nil {
		t.Errorf("the negative control, every setting done right, was refused: %v", f)
	}
}

// Every owned key is one gitlab-runner has: a misspelt entry would guard
// nothing.
func TestEveryOwnedKeyIsAKeyOfGitLabRunner(t *testing.T) {
	schema, err := oracle.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range runnerconfig.OwnedKeys() {
		expanded := []string{p}
		if strings.Contains(p, "*_container_security_context") {
			expanded = nil
			for _, c := range []string{"build", "helper", "service", "init_permissions"} {
				expanded = append(expanded, strings.Replace(p, "*", c, 1))
			}
		}
		for _, e := range expanded {
			if schema.Lookup("runners."+e) == nil {
				t.Errorf("owned key %s is not a key of gitlab-runner's [[runners]]", e)
			}
		}
	}
	// Every key of [runners.kubernetes] whose name says it reaches another
	// namespace, identity, node or privilege is owned: a new gitlab-runner
	// key of that kind fails here until it is judged.
	for _, k := range schema.Keys("runners.kubernetes") {
		risky := false
		for _, w := range []string{"namespace", "service_account", "privilege", "bearer", "node_", "host", "cap_add", "pod_spec", "affinity", "scheduler", "volumes"} {
			if strings.Contains(k, w) {
				risky = true
			}
		}
		// Judged harmless: host_aliases only writes the pod's /etc/hosts;
		// use_service_account_image_pull_secrets uses the pull secrets of
		// the job pods' ServiceAccount (the RunnerSet's own, or the default
		// of its jobs namespace), which has none runnerfleet did not give
		// it: the managers may only read ServiceAccounts there.
		harmless := k == "host_aliases" || k == "use_service_account_image_pull_secrets"
		if risky && !harmless && !slices.Contains(runnerconfig.OwnedKeys(), "kubernetes."+k) {
			t.Errorf("[runners.kubernetes] %s looks like it reaches past the jobs namespace, but configOverride may set it", k)
		}
	}
}

// What the ClassAccepted step spends on a RunnerSet's job settings every
// pass: with a configOverride (render, merge, schema walk) and without.
func BenchmarkCheckJobSettings(b *testing.B) {
	if _, err := oracle.Embedded(); err != nil {
		b.Fatal(err)
	}
	for name, rs := range map[string]*v1alpha1.RunnerSet{"with override": jobsRunnerSet(), "without override": func() *v1alpha1.RunnerSet {
		rs := jobsRunnerSet()
		rs.Spec.Jobs.ConfigOverride = ""
		return rs
	}()} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if f := runnerconfig.CheckJobSettings(rs, class()); f != nil {
					b.Fatal(f)
				}
			}
		})
	}
}

// Decoding the embedded snapshot, once per controller process.
func BenchmarkDecodeEmbeddedSnapshot(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := oracle.DecodeSnapshot(oracle.EmbeddedBytes()); err != nil {
			b.Fatal(err)
		}
	}
}

// A RunnerSet without job settings renders byte for byte what it did
// before they existed, so an upgrade rolls no manager: none of their keys
// appears, not even as a zero.
func TestARunnerSetWithoutJobSettingsRendersNoneOfTheirKeys(t *testing.T) {
	for name, rs := range runnerSets() {
		out, err := runnerconfig.Render(runnerconfig.ForRunnerSet(rs, class(), jobPlacement()))
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"poll_timeout", "image_pull_secrets", "services", "volumes", "feature_flags", "environment"} {
			if strings.Contains(string(out), key) {
				t.Errorf("%s: the config has %s:\n%s", name, key, out)
			}
		}
	}
}
