package oracle

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// loadSchema loads the real gitlab-runner schema. It needs the Go module
// proxy (or a warm module cache); without one the test fails rather than
// skips, so a broken download cannot pass unnoticed.
func loadSchema(tb testing.TB) *Schema {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Load(ctx)
	if err != nil {
		tb.Fatalf("Load: %v", err)
	}
	return s
}

func readTestdata(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// problemStrings returns the messages of the problems in err.
func problemStrings(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	for _, p := range Problems(err) {
		out = append(out, p.Error())
	}
	if err != nil && len(out) == 0 {
		t.Fatalf("error carries no *Problem: %v", err)
	}
	return out
}

func TestLoadFindsWellKnownKeys(t *testing.T) {
	s := loadSchema(t)
	tests := []struct {
		path string
		want []string
	}{
		{"", []string{"concurrent", "check_interval", "listen_address", "shutdown_timeout", "log_format", "log_level", "runners", "session_server", "machine"}},
		{"runners", []string{"name", "url", "token", "executor", "limit", "id", "token_obtained_at", "token_expires_at", "environment", "feature_flags", "cache", "docker", "kubernetes", "machine", "autoscaler", "custom"}},
		{"runners.kubernetes", []string{
			"namespace", "image", "privileged", "cpu_request", "cpu_limit", "memory_request", "memory_limit",
			"helper_cpu_request", "service_cpu_request", "service_account", "node_selector", "node_tolerations",
			"pod_annotations", "pod_labels", "volumes", "affinity", "pod_security_context", "pull_policy",
		}},
		// The cache table mixes CamelCase keys with lower-case sub-tables.
		{"runners.cache", []string{"Type", "Path", "Shared", "MaxUploadedArchiveSize", "s3", "gcs", "azure"}},
		{"runners.cache.s3", []string{"ServerAddress", "AccessKey", "SecretKey", "BucketName", "BucketLocation", "AuthenticationType", "Insecure"}},
		{"runners.cache.gcs", []string{"CredentialsFile", "BucketName", "AccessID", "PrivateKey"}},
		// docker+machine keys are CamelCase; several are untagged Go field names.
		{"runners.machine", []string{"IdleCount", "IdleTime", "MaxBuilds", "MachineDriver", "MachineName", "MachineOptions", "autoscaling"}},
		{"runners.machine.autoscaling", []string{"Periods", "Timezone", "IdleCount", "IdleTime"}},
		// docker-autoscaler (fleeting).
		{"runners.autoscaler", []string{"plugin", "plugin_config", "connector_config", "capacity_per_instance", "max_use_count", "max_instances", "policy"}},
		{"runners.autoscaler.policy", []string{"periods", "timezone", "idle_count", "idle_time", "scale_factor"}},
		{"runners.autoscaler.connector_config", []string{"username", "use_external_addr", "keepalive", "timeout"}},
		// Embedded docker.Credentials is inlined into [runners.docker].
		{"runners.docker", []string{"host", "tls_verify", "tls_cert_path", "image", "privileged", "volumes"}},
	}
	for _, tt := range tests {
		t.Run("path "+tt.path, func(t *testing.T) {
			keys := s.Keys(tt.path)
			if keys == nil {
				t.Fatalf("Keys(%q) = nil", tt.path)
			}
			if !slices.IsSorted(keys) {
				t.Errorf("Keys(%q) not sorted: %v", tt.path, keys)
			}
			for _, k := range tt.want {
				if !slices.Contains(keys, k) {
					t.Errorf("Keys(%q) lacks %q; have %v", tt.path, k, keys)
				}
			}
		})
	}
}

func TestLoadGivesKeysTheirGoTypes(t *testing.T) {
	s := loadSchema(t)
	tests := []struct {
		path string
		kind Kind
		elem Kind // for Map, Slice
		name string
	}{
		{path: "concurrent", kind: Int},
		{path: "log_format", kind: String}, // *string: pointers are transparent
		{path: "connection_max_age", kind: Duration, name: "time.Duration"},
		{path: "runners", kind: Slice, elem: Struct},
		{path: "runners.kubernetes", kind: Struct, name: "common.KubernetesConfig"},
		{path: "runners.kubernetes.privileged", kind: Bool},
		{path: "runners.kubernetes.node_selector", kind: Map, elem: String},
		// Not an array of tolerations: a map of "key=value" to effect.
		{path: "runners.kubernetes.node_tolerations", kind: Map, elem: String},
		{path: "runners.kubernetes.pod_annotations", kind: Map, elem: String},
		{path: "runners.kubernetes.pod_labels", kind: Map, elem: String},
		{path: "runners.kubernetes.retry_limit", kind: Int, name: "common.RequestRetryLimit"},
		{path: "runners.kubernetes.dns_policy", kind: String, name: "common.KubernetesDNSPolicy"},
		{path: "runners.kubernetes.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution.weight", kind: Int},
		{path: "runners.kubernetes.volumes.empty_dir", kind: Slice, elem: Struct},
		{path: "runners.docker.allowed_pull_policies", kind: Slice, elem: String},
		{path: "runners.cache", kind: Struct, name: "cacheconfig.Config"},
		{path: "runners.cache.Shared", kind: Bool},
		{path: "runners.machine.IdleTime", kind: Int},                    // seconds, an int
		{path: "runners.machine.HeartbeatInterval", kind: Duration},      // a duration
		{path: "runners.autoscaler.policy.idle_time", kind: Duration},    // a duration
		{path: "runners.autoscaler.plugin_config", kind: Map, elem: Any}, // map[string]any
		{path: "runners.autoscaler.instance_operation_time_buckets", kind: Slice, elem: Float},
		{path: "runners.feature_flags", kind: Map, elem: Bool},
		{path: "runners.kubernetes.pull_policy", kind: Opaque, name: "common.StringOrArray"},
		{path: "runners.token_obtained_at", kind: Opaque, name: "time.Time"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			typ := s.Lookup(tt.path)
			if typ == nil {
				t.Fatalf("Lookup(%q) = nil", tt.path)
			}
			if typ.Kind != tt.kind {
				t.Errorf("kind = %s, want %s", typ.Kind, tt.kind)
			}
			if tt.elem != Invalid && (typ.Elem == nil || typ.Elem.Kind != tt.elem) {
				t.Errorf("elem = %v, want %s", typ.Elem, tt.elem)
			}
			if tt.name != "" && typ.Name != tt.name {
				t.Errorf("name = %q, want %q", typ.Name, tt.name)
			}
		})
	}
}

func TestLoadRecordsOpaqueKeysWithReasons(t *testing.T) {
	s := loadSchema(t)
	got := map[string]OpaqueKey{}
	for _, o := range s.Opaque() {
		if o.Reason == "" {
			t.Errorf("opaque %s has no reason", o.Path)
		}
		got[o.Path] = o
	}
	want := map[string]string{
		"runners.docker.pull_policy":                                           "UnmarshalTOML",
		"runners.kubernetes.pull_policy":                                       "UnmarshalTOML",
		"runners.kubernetes.volumes.nfs":                                       "UnmarshalTOML",
		"runners.token_obtained_at":                                            "outside the gitlab-runner module",
		"runners.token_expires_at":                                             "outside the gitlab-runner module",
		"runners.kubernetes.build_container_security_context.capabilities.add": "outside the gitlab-runner module",
		"runners.kubernetes.build_container_security_context.proc_mount":       "outside the gitlab-runner module",
	}
	for p, reason := range want {
		o, ok := got[p]
		if !ok {
			t.Errorf("%s not recorded as opaque", p)
			continue
		}
		if !strings.Contains(o.Reason, reason) {
			t.Errorf("%s: reason %q does not mention %q", p, o.Reason, reason)
		}
	}
}

func TestLoadIsCachedPerProcess(t *testing.T) {
	a, b := loadSchema(t), loadSchema(t)
	if a != b {
		t.Error("second Load parsed again instead of reusing the first schema")
	}
	if _, err := os.Stat(filepath.Join(a.ModuleDir, "common", "config.go")); err != nil {
		t.Errorf("ModuleDir %s is not the gitlab-runner source: %v", a.ModuleDir, err)
	}
}

func TestKeysOfUnknownOrNonTablePathIsNil(t *testing.T) {
	s := loadSchema(t)
	for _, p := range []string{"nope", "runners.kubernetes.nope", "concurrent", "runners.kubernetes.node_selector"} {
		if keys := s.Keys(p); keys != nil {
			t.Errorf("Keys(%q) = %v, want nil", p, keys)
		}
	}
	// Index suffixes and BurntSushi's case-insensitive key matching are understood.
	if keys := s.Keys("RUNNERS[3].Kubernetes"); !slices.Contains(keys, "node_selector") {
		t.Errorf("Keys(RUNNERS[3].Kubernetes) = %v", keys)
	}
}

func TestCheckAcceptsRealisticConfigs(t *testing.T) {
	s := loadSchema(t)
	for _, name := range []string{"kubernetes.toml", "docker-machine.toml", "docker-autoscaler.toml"} {
		t.Run(name, func(t *testing.T) {
			if err := s.Check(readTestdata(t, name)); err != nil {
				t.Errorf("Check(%s):\n%v", name, err)
			}
		})
	}
}

func TestCheckAcceptsWhatGitLabRunnerAccepts(t *testing.T) {
	s := loadSchema(t)
	tests := []struct {
		name string
		toml string
	}{
		{"empty config", ``},
		{"map keys are arbitrary, even with slashes and dots", `
[[runners]]
  [runners.kubernetes.node_selector]
    "a/b" = "c"
    "kubernetes.io/os" = "linux"
`},
		{"inline map", `
[[runners]]
  [runners.kubernetes]
    node_selector = {"a/b" = "c"}
`},
		{"pull_policy as a string (decoded by StringOrArray.UnmarshalTOML)", `
[[runners]]
  [runners.kubernetes]
    pull_policy = "always"
`},
		{"pull_policy as an array", `
[[runners]]
  [runners.docker]
    pull_policy = ["always", "if-not-present"]
`},
		{"duration as an integer of nanoseconds", `
[[runners]]
  [runners.autoscaler]
    instance_acquire_timeout = 900000000000
`},
		{"untagged field matched case-insensitively, as BurntSushi does", `
[[runners]]
  [runners.machine]
    idlecount = 2
    machinedriver = "google"
`},
		{"tagged key matched case-insensitively, as BurntSushi does", `
Concurrent = 4
`},
		{"float field takes an integer", `
[[runners]]
  [runners.autoscaler]
    [[runners.autoscaler.policy]]
      scale_factor = 1
`},
		{"any-typed plugin_config takes nested tables and arrays", `
[[runners]]
  [runners.autoscaler.plugin_config]
    zones = ["a", "b"]
    [runners.autoscaler.plugin_config.nested]
      deep = { x = 1, y = [true] }
`},
		{"nfs volumes are decoded by their own UnmarshalTOML", `
[[runners]]
  [[runners.kubernetes.volumes.nfs]]
    name = "n"
    whatever = 1
`},
		{"datetime token timestamps", `
[[runners]]
  token_obtained_at = 2026-01-01T00:00:00Z
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Check([]byte(tt.toml)); err != nil {
				t.Errorf("Check:\n%v", err)
			}
		})
	}
}

func TestCheckReportsEachProblemWithItsKeyPath(t *testing.T) {
	s := loadSchema(t)
	tests := []struct {
		name string
		toml string
		want []string
	}{
		{
			name: "typo in a kubernetes key is unknown and gets a suggestion",
			toml: `
[[runners]]
  executor = "kubernetes"
  [runners.kubernetes]
    [runners.kubernetes.node_selectors]
      "kubernetes.io/arch" = "amd64"
`,
			want: []string{`runners[0].kubernetes.node_selectors: unknown key (gitlab-runner's common.KubernetesConfig has no toml key "node_selectors"); did you mean "node_selector"?`},
		},
		{
			name: "string for a bool",
			toml: `
[[runners]]
  [runners.kubernetes]
    privileged = "yes"
`,
			want: []string{`runners[0].kubernetes.privileged: want bool, got string "yes"`},
		},
		{
			name: "string for an int at the top level",
			toml: `concurrent = "10"`,
			want: []string{`concurrent: want integer, got string "10"`},
		},
		{
			name: "unknown top-level key with a near miss",
			toml: `concurrency = 10`,
			want: []string{`concurrency: unknown key (gitlab-runner's common.Config has no toml key "concurrency"); did you mean "concurrent"?`},
		},
		{
			name: "unknown top-level key without a near miss",
			toml: `fleet_owner = "platform-team"`,
			want: []string{`fleet_owner: unknown key (gitlab-runner's common.Config has no toml key "fleet_owner")`},
		},
		{
			name: "bad key inside the s3 cache table",
			toml: `
[[runners]]
  [runners.cache]
    Type = "s3"
    [runners.cache.s3]
      BucketNmae = "cache"
`,
			want: []string{`runners[0].cache.s3.BucketNmae: unknown key (gitlab-runner's cacheconfig.CacheS3Config has no toml key "BucketNmae"); did you mean "BucketName"?`},
		},
		{
			name: "snake_case spelling of a CamelCase cache key",
			toml: `
[[runners]]
  [runners.cache.s3]
    bucket_name = "cache"
`,
			want: []string{`runners[0].cache.s3.bucket_name: unknown key (gitlab-runner's cacheconfig.CacheS3Config has no toml key "bucket_name"); did you mean "BucketName"?`},
		},
		{
			name: "map values are checked against the map's value type",
			toml: `
[[runners]]
  [runners.kubernetes]
    node_selector = {a = 1, "b/c" = "ok", "d.e" = true}
`,
			want: []string{
				`runners[0].kubernetes.node_selector.a: want string, got integer 1`,
				`runners[0].kubernetes.node_selector."d.e": want string, got bool true`,
			},
		},
		{
			name: "tolerations as an array of tables instead of a map",
			toml: `
[[runners]]
  [[runners.kubernetes.node_tolerations]]
    key = "ci"
    effect = "NoSchedule"
`,
			want: []string{`runners[0].kubernetes.node_tolerations: want table, got array of tables`},
		},
		{
			name: "runners as a single table instead of an array of tables",
			toml: `
[runners]
  name = "x"
`,
			want: []string{`runners: want array of tables, got table`},
		},
		{
			name: "a scalar where a table is expected",
			toml: `
[[runners]]
  kubernetes = "yes"
`,
			want: []string{`runners[0].kubernetes: want table (common.KubernetesConfig), got string "yes"`},
		},
		{
			name: "a duration string that does not parse",
			toml: `
[[runners]]
  [runners.autoscaler]
    instance_acquire_timeout = "15 minutes"
`,
			want: []string{`runners[0].autoscaler.instance_acquire_timeout: want duration, got string "15 minutes" that is not one (like "30s", "1h30m")`},
		},
		{
			name: "a bool for a duration",
			toml: `
connection_max_age = true
`,
			want: []string{`connection_max_age: want duration (a string like "30s" or an integer of nanoseconds), got bool true`},
		},
		{
			name: "machine autoscaling periods must be an array",
			toml: `
[[runners]]
  [runners.machine]
    IdleCount = "5"
    [[runners.machine.autoscaling]]
      Periods = "* * 9-17 * * mon-fri *"
`,
			want: []string{
				`runners[0].machine.IdleCount: want integer, got string "5"`,
				`runners[0].machine.autoscaling[0].Periods: want array, got string "* * 9-17 * * mon-fri *"`,
			},
		},
		{
			name: "integer out of an int32 field's range",
			toml: `
[[runners]]
  [[runners.kubernetes.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution]]
    weight = 3000000000
`,
			want: []string{`runners[0].kubernetes.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution[0].weight: want int32, got integer 3000000000 (out of range)`},
		},
		{
			name: "array elements are checked with their index",
			toml: `
[[runners]]
  environment = ["A=1", 2]
[[runners]]
  [[runners.kubernetes.volumes.empty_dir]]
    name = "x"
    mount_pth = "/x"
`,
			want: []string{
				`runners[0].environment[1]: want string, got integer 2`,
				`runners[1].kubernetes.volumes.empty_dir[0].mount_pth: unknown key (gitlab-runner's common.KubernetesEmptyDir has no toml key "mount_pth"); did you mean "mount_path"?`,
			},
		},
		{
			name: "problems come in key order, all of them",
			toml: `
zzz = 1
concurrent = "many"
[[runners]]
  privileged = true
  executor = 1
`,
			want: []string{
				`concurrent: want integer, got string "many"`,
				`runners[0].executor: want string, got integer 1`,
				`runners[0].privileged: unknown key (gitlab-runner's common.RunnerConfig has no toml key "privileged")`,
				`zzz: unknown key (gitlab-runner's common.Config has no toml key "zzz")`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Check([]byte(tt.toml))
			if err == nil {
				t.Fatal("Check accepted the config")
			}
			got := problemStrings(t, err)
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if err.Error() != strings.Join(tt.want, "\n") {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

func TestCheckIsDeterministic(t *testing.T) {
	s := loadSchema(t)
	doc := []byte(`
a = 1
b = 2
c = 3
[[runners]]
  [runners.kubernetes.node_selector]
    x = 1
    y = 2
    z = 3
`)
	first := s.Check(doc).Error()
	for range 20 {
		if got := s.Check(doc).Error(); got != first {
			t.Fatalf("Check output changed:\n%s\nvs\n%s", got, first)
		}
	}
}

func TestCheckRejectsInvalidTOML(t *testing.T) {
	s := loadSchema(t)
	err := s.Check([]byte("concurrent = = 1"))
	if err == nil || !strings.Contains(err.Error(), "not valid TOML") {
		t.Fatalf("Check = %v, want a TOML syntax error", err)
	}
	if len(Problems(err)) != 0 {
		t.Errorf("a syntax error should not be reported as key problems")
	}
}

// TestLoadDirFollowsBurntSushiFieldRules walks a small stand-in module under
// testdata/fakerunner to pin down the rules the real walk relies on.
func TestLoadDirFollowsBurntSushiFieldRules(t *testing.T) {
	s, err := LoadDir(filepath.Join("testdata", "fakerunner"))
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{
		"Untagged",     // untagged field: its Go name
		"alias",        // alias to a named string in another package
		"anonymous",    // inline struct type
		"arr",          // [2]string
		"bad",          // chan: gitlab-runner cannot decode into it
		"by_name",      // map of structs
		"defined",      // type A B: B's structure without B's UnmarshalText
		"depth",        // the shallow field wins over the inlined one
		"dur",          // time.Duration
		"dur_ptr",      // *time.Duration
		"empty",        // interface{}
		"ext",          // outside the module
		"from_pointer", // from an embedded *PtrInlined
		"host",         // from embedded credentials.Creds in another package
		"iface",        // any
		"inner",        // from embedded Inlined
		"int_map",      // map[int]string: not decodable
		"left_only",    // from embedded Left; "clash" is in Left and Right and dropped
		"mode",         // from embedded credentials.Creds
		"my_dur",       // type MyDuration time.Duration: a plain integer
		"name",         // ",omitempty" dropped
		"node",         // recursive type
		"open",         // embeds a struct from outside the module
		"os",           // the linux variant of a per-OS type
		"promoted",     // struct with a promoted UnmarshalText
		"ratio",        // float32
		"saver",        // non-empty interface
		"small",        // int8
		"tagged",       // embedded struct with a tag: a table, not inlined
		"text",         // has UnmarshalText
		"things",       // []*Thing
		"unsigned",     // uint16
	}
	if got := s.Keys(""); !slices.Equal(got, wantKeys) {
		t.Errorf("Keys() =\n%v\nwant\n%v", got, wantKeys)
	}
	kinds := map[string]Kind{
		"alias": String, "anonymous": Struct, "arr": Array, "bad": Invalid, "by_name": Map,
		"dur": Duration, "dur_ptr": Duration, "empty": Any, "ext": Opaque, "iface": Any,
		"int_map": Invalid, "my_dur": Int, "node": Struct, "promoted": Opaque, "saver": Invalid,
		"small": Int, "tagged": Struct, "text": Opaque, "things": Slice, "unsigned": Uint,
		"node.children.children.name": String, "by_name.*.tags": Map,
		"defined": Struct, "defined.value": String, "open": Struct,
	}
	for p, k := range kinds {
		if typ := s.Lookup(p); typ == nil || typ.Kind != k {
			t.Errorf("Lookup(%q) = %v, want kind %s", p, typ, k)
		}
	}
	if got := s.Keys("os"); !slices.Equal(got, []string{"linux"}) {
		t.Errorf("Keys(os) = %v, want the linux build's [linux]", got)
	}
	if got := s.Keys("tagged"); !slices.Equal(got, []string{"depth", "inner"}) {
		t.Errorf("Keys(tagged) = %v", got)
	}
	if open := s.Lookup("open"); !open.Open || !strings.Contains(open.Reason, "k8s.Meta") {
		t.Errorf("open: Open = %v, Reason = %q; want open because of k8s.Meta", open.Open, open.Reason)
	}
	var opaque []string
	for _, o := range s.Opaque() {
		opaque = append(opaque, o.Path)
	}
	if want := []string{"ext", "open", "promoted", "text"}; !slices.Equal(opaque, want) {
		t.Errorf("Opaque() paths = %v, want %v", opaque, want)
	}
	if r := s.Lookup("promoted").Reason; !strings.Contains(r, "UnmarshalText") || !strings.Contains(r, "promoted") {
		t.Errorf("promoted reason = %q", r)
	}

	tests := []struct {
		name string
		toml string
		want []string
	}{
		{"valid document", `
name = "n"
untagged = 3
inner = "i"
host = "h"
mode = "m"
dur = "1s"
my_dur = 5
text = { anything = [1, 2] }
promoted = 1
ext = "x"
iface = [1, "a"]
arr = ["a", "b"]
small = -128
unsigned = 65535
ratio = 2.5
[node]
  name = "root"
  [[node.children]]
    name = "kid"
    [[node.children.children]]
      name = "grandkid"
[[things]]
  id = 1
  tags = { a = "b" }
[by_name.first]
  id = 2
`, nil},
		{"checks reach into recursive types and maps of structs", `
[[node.children]]
  [[node.children.children]]
    nam = "x"
[by_name.x]
  id = "2"
`, []string{
			`by_name.x.id: want integer, got string "2"`,
			`node.children[0].children[0].nam: unknown key (gitlab-runner's common.Node has no toml key "nam"); did you mean "name"?`,
		}},
		{"skipped, unexported and dropped fields are unknown keys", `
Skipped = "s"
unexported = "u"
clash = "c"
`, []string{
			`Skipped: unknown key (gitlab-runner's common.Config has no toml key "Skipped")`,
			`clash: unknown key (gitlab-runner's common.Config has no toml key "clash")`,
			`unexported: unknown key (gitlab-runner's common.Config has no toml key "unexported")`,
		}},
		{"undecodable types, array length and number ranges", `
bad = 1
int_map = {}
saver = "s"
arr = ["a"]
small = 128
unsigned = -1
my_dur = "1s"
ratio = "fast"
`, []string{
			`arr: want array of exactly 2 elements, got 1`,
			`bad: gitlab-runner cannot load any value here: BurntSushi/toml cannot decode into a channel`,
			`int_map: gitlab-runner cannot load any value here: BurntSushi/toml only decodes into maps with string keys, not int`,
			`my_dur: want integer, got string "1s"`,
			`ratio: want float, got string "fast"`,
			`saver: gitlab-runner cannot load any value here: BurntSushi/toml only decodes into empty interfaces`,
			`small: want int8, got integer 128 (out of range)`,
			`unsigned: want uint16, got integer -1 (out of range)`,
		}},
		{"unknown keys of a struct embedding an unseen struct are let through", `
[open]
  kind = "Pod"
  own = 1
[defined]
  value = "v"
  other = "o"
`, []string{
			`defined.other: unknown key (gitlab-runner's common.DefinedFromAlias has no toml key "other")`,
			`open.own: want string, got integer 1`,
		}},
		{"unknown key inside an unnamed struct", `
[anonymous]
  innr = true
`, []string{
			`anonymous.innr: unknown key (gitlab-runner's this table has no toml key "innr"); did you mean "inner"?`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problemStrings(t, s.Check([]byte(tt.toml)))
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestLoadDirFailsWithoutTheConfigPackage(t *testing.T) {
	_, err := LoadDir(t.TempDir())
	if err == nil {
		t.Fatal("LoadDir of an empty dir succeeded")
	}
	if !strings.Contains(err.Error(), "oracle: loading gitlab-runner config structs") {
		t.Errorf("error lacks context: %v", err)
	}
}

func TestLoadDirReportsSourceItCannotParse(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"common/config.go": "package common\n\nimport \"gitlab.com/gitlab-org/gitlab-runner/broken\"\n\ntype Config struct {\n\tB broken.T `toml:\"b\"`\n}\n",
		"broken/broken.go": "package broken\n\ntype T struct {\n",
	}
	for name, src := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := LoadDir(dir)
	if err == nil || !strings.Contains(err.Error(), "parsing package gitlab.com/gitlab-org/gitlab-runner/broken") {
		t.Fatalf("LoadDir = %v, want a parse error naming the broken package", err)
	}
}

func BenchmarkCheck(b *testing.B) {
	s := loadSchema(b)
	doc := readTestdata(b, "kubernetes.toml")
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Check(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadDir(b *testing.B) {
	dir := loadSchema(b).ModuleDir
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadDir(dir); err != nil {
			b.Fatal(err)
		}
	}
}
