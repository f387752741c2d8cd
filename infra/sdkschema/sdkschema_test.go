package sdkschema

import (
	"context"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
)

func load(t testing.TB) *Schema {
	t.Helper()
	s, err := Load(context.Background(), "aws:s3", "gcp:storage", "kubernetes:helm/v3", "kubernetes:core/v1")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestKnownResources(t *testing.T) {
	s := load(t)
	for _, tok := range []string{"aws:s3/bucketV2:BucketV2", "gcp:storage/bucket:Bucket", "kubernetes:helm.sh/v3:Release", "kubernetes:core/v1:Namespace"} {
		if _, ok := s.Resources[tok]; !ok {
			t.Errorf("%s not loaded", tok)
		}
	}
}

func TestCheck(t *testing.T) {
	s := load(t)
	cases := []struct {
		tok    string
		inputs map[string]any
		want   []string
	}{
		{"gcp:storage/bucket:Bucket", map[string]any{
			"location":                 "EU",
			"uniformBucketLevelAccess": true,
			"lifecycleRules": []any{map[string]any{
				"action":    map[string]any{"type": "Delete"},
				"condition": map[string]any{"age": 14},
			}},
		}, nil},
		{"gcp:storage/bucket:Bucket", map[string]any{}, []string{
			"gcp:storage/bucket:Bucket.location: required input of bucketArgs is missing"}},
		{"gcp:storage/bucket:Bucket", map[string]any{"location": "EU", "lifecycleRule": []any{}}, []string{
			`gcp:storage/bucket:Bucket.lifecycleRule: unknown input of bucketArgs; did you mean "lifecycleRules"?`}},
		{"gcp:storage/bucket:Bucket", map[string]any{"location": "EU", "lifecycleRules": []any{map[string]any{
			"action": map[string]any{"type": "Delete"}, "condition": map[string]any{"age": "14"}}}}, []string{
			"gcp:storage/bucket:Bucket.lifecycleRules[0].condition.age: want number (int), got string"}},
		{"gcp:storage/bucket:Bucket", map[string]any{"location": "EU", "lifecycleRules": []any{map[string]any{"condition": map[string]any{}}}}, []string{
			"gcp:storage/bucket:Bucket.lifecycleRules[0].action: required input of BucketLifecycleRule is missing"}},
		{"kubernetes:helm.sh/v3:Release", map[string]any{"chart": "gitlab-runner", "values": map[string]any{"anything": []any{1, "x"}},
			"repositoryOpts": map[string]any{"repo": "https://charts.gitlab.io"}}, nil},
		{"kubernetes:core/v1:Namespace", map[string]any{"metadata": map[string]any{"name": "x", "labels": map[string]any{"a": "b"}, "lables": map[string]any{}}}, []string{
			`kubernetes:core/v1:Namespace.metadata.lables: unknown input of ObjectMeta; did you mean "labels"?`}},
		{"aws:s3/bucketV2:Bucket", nil, []string{"aws:s3/bucketV2:Bucket: no such resource type"}},
	}
	for _, c := range cases {
		got := s.Check(c.tok, resource.NewPropertyMapFromMap(c.inputs))
		if len(got) != len(c.want) {
			t.Errorf("Check(%s, %v) = %q, want %q", c.tok, c.inputs, got, c.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], c.want[i]) {
				t.Errorf("Check(%s)[%d] = %q, want prefix %q", c.tok, i, got[i], c.want[i])
			}
		}
	}
}

func TestSecretsAndUnknownsAreLookedThrough(t *testing.T) {
	s := load(t)
	in := resource.PropertyMap{
		"location": resource.MakeSecret(resource.NewStringProperty("EU")),
		"labels":   resource.MakeComputed(resource.NewStringProperty("")),
		"versioning": resource.MakeSecret(resource.NewObjectProperty(resource.PropertyMap{
			"enabld": resource.NewBoolProperty(true),
		})),
	}
	got := s.Check("gcp:storage/bucket:Bucket", in)
	if len(got) != 2 || !strings.Contains(got[0], "versioning.enabld: unknown input") || !strings.Contains(got[1], "versioning.enabled: required input") {
		t.Errorf("Check = %q, want the misspelt key inside the secret and the missing one named", got)
	}
}

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		loaded = map[string]*Schema{}
		load(b)
	}
}
