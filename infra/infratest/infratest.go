// Package infratest runs the runnerfleet Pulumi program under Pulumi's mocks
// (pulumi.RunErr with pulumi.WithMocks) and records what it registers.
//
// The outputs the mocks make up are checked too: each must be an output of
// the resource's generated type (infra/internal/sdk), read from the
// provider SDK, so a mock cannot hand the program an output the provider
// never sends.
//
// Every custom resource the program registers is checked against the
// provider's schema read from its SDK source (infra/sdkschema): an unknown
// type token, an unknown or misspelt input, a value of the wrong shape or a
// missing required input fails the run, as the real provider would.
package infratest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/infra/internal/pulumix"
	"github.com/runnerfleet/runnerfleet/infra/sdkschema"
)

// Project is the Pulumi project name (Pulumi.yaml).
const Project = "runnerfleet"

// SchemaPackages are the SDK packages whose resources the program registers;
// a resource of a token outside them fails the run as unknown.
var SchemaPackages = []string{
	"aws:.", "gcp:.", "kubernetes:.",
	"aws:ec2", "aws:eks", "aws:iam", "aws:sqs", "aws:cloudwatch", "aws:s3",
	"gcp:compute", "gcp:container", "gcp:serviceaccount", "gcp:projects", "gcp:storage", "gcp:iam", "gcp:secretmanager",
	"kubernetes:helm/v3", "kubernetes:core/v1", "kubernetes:apps/v1", "kubernetes:rbac/v1",
	"kubernetes:apiextensions/v1", "kubernetes:policy/v1", "kubernetes:networking/v1",
	"kubernetes:autoscaling/v2", "kubernetes:batch/v1",
}

// StackReferenceToken is the type of a StackReference, which the engine
// answers itself (Mocks.StackOutputs).
const StackReferenceToken = "pulumi:pulumi:StackReference"

// Resource is one registration the program made.
type Resource struct {
	Token, Name, URN string
	// Parent is the URN of the parent ("" for the stack).
	Parent string
	// Custom is false for component resources.
	Custom bool
	// Provider is the provider reference, for resources with an explicit one.
	Provider string
	Inputs   resource.PropertyMap
	// DependsOn lists the URNs the resource was told to wait for.
	DependsOn []string
	// ReplaceOnChanges, DeleteBeforeReplace and DeleteTimeout are the
	// resource options of those names.
	ReplaceOnChanges    []string
	DeleteBeforeReplace bool
	DeleteTimeout       string
	// DeletedWith is the URN of the resource whose deletion deletes this
	// one (pulumi.DeletedWith: the engine skips this one's Delete);
	// RetainOnDelete is the option of that name.
	DeletedWith    string
	RetainOnDelete bool
	// Read is true for a resource the program reads from the provider
	// (ctx.ReadResource) rather than declares; ID is the ID it reads.
	Read bool
	ID   string
	// Aliases are the resource's aliases as the program sent them (alias
	// specs: the engine resolves them, see AliasURNs).
	Aliases []*pulumirpc.Alias
}

// Input returns the named input, following dotted keys into objects and
// looking through secrets; the zero PropertyValue when absent.
func (r Resource) Input(path string) resource.PropertyValue {
	v := resource.NewObjectProperty(r.Inputs)
	for _, k := range strings.Split(path, ".") {
		for v.IsSecret() {
			v = v.SecretValue().Element
		}
		if !v.IsObject() {
			return resource.PropertyValue{}
		}
		v = v.ObjectValue()[resource.PropertyKey(k)]
	}
	for v.IsSecret() {
		v = v.SecretValue().Element
	}
	return v
}

// Mocks implements pulumi.MockResourceMonitor.
type Mocks struct {
	schema *sdkschema.Schema

	// Outputs, keyed by type token, add the outputs a provider computes to
	// the inputs echoed back (IDs, ARNs, endpoints).
	Outputs map[string]func(r Resource) resource.PropertyMap
	// Calls answer invokes by token.
	Calls map[string]func(args resource.PropertyMap) (resource.PropertyMap, error)
	// StackOutputs are the outputs of the stack's previous deployment, as
	// a StackReference (pulumi:pulumi:StackReference) reads them; nil is a
	// stack never deployed.
	StackOutputs resource.PropertyMap

	mu        sync.Mutex
	resources []Resource
	problems  []string
}

// NewMocks returns mocks that check registrations against the provider SDK
// schemas, failing t when they cannot be loaded.
func NewMocks(t testing.TB) *Mocks {
	t.Helper()
	s, err := sdkschema.Load(context.Background(), SchemaPackages...)
	if err != nil {
		t.Fatal(err)
	}
	return &Mocks{schema: s, Outputs: DefaultOutputs(), Calls: map[string]func(resource.PropertyMap) (resource.PropertyMap, error){}}
}

// NewResource records a registration and checks custom resources' inputs.
func (m *Mocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	r := Resource{Token: args.TypeToken, Name: args.Name, Custom: args.Custom, Provider: args.Provider, Inputs: args.Inputs}
	if rpc := args.RegisterRPC; rpc != nil {
		r.Parent = rpc.GetParent()
		r.DependsOn = rpc.GetDependencies()
		r.ReplaceOnChanges = rpc.GetReplaceOnChanges()
		r.DeleteBeforeReplace = rpc.GetDeleteBeforeReplace()
		r.DeleteTimeout = rpc.GetCustomTimeouts().GetDelete()
		r.DeletedWith, r.RetainOnDelete = rpc.GetDeletedWith(), rpc.GetRetainOnDelete()
		r.Aliases = rpc.GetAliases()
		r.URN = urn(r.Parent, args.TypeToken, args.Name)
	}
	if rpc := args.ReadRPC; rpc != nil {
		r.Parent, r.DependsOn, r.Read, r.ID = rpc.GetParent(), rpc.GetDependencies(), true, args.ID
		r.URN = urn(r.Parent, args.TypeToken, args.Name)
	}
	var problems []string
	if args.Custom && !customResource(args.TypeToken) {
		problems = m.schema.Check(args.TypeToken, args.Inputs)
	}
	m.mu.Lock()
	// The engine refuses two resources of one type and name under one
	// parent ("Duplicate resource URN"); the mock monitor does not.
	for _, o := range m.resources {
		if o.Token == r.Token && o.Name == r.Name && o.Parent == r.Parent {
			problems = append(problems, fmt.Sprintf("%s %q: duplicate resource URN (another resource of this type has this name)", r.Token, r.Name))
		}
	}
	m.resources = append(m.resources, r)
	m.problems = append(m.problems, problems...)
	m.mu.Unlock()
	if len(problems) > 0 {
		return "", nil, fmt.Errorf("%s %q is refused:\n  %s", args.TypeToken, args.Name, strings.Join(problems, "\n  "))
	}
	out := args.Inputs.Copy()
	if args.TypeToken == StackReferenceToken {
		// The engine's answer: the referenced stack's outputs.
		outputs := m.StackOutputs
		if outputs == nil {
			outputs = resource.PropertyMap{}
		}
		out["outputs"] = resource.NewObjectProperty(outputs.Copy())
	}
	if f, ok := m.Outputs[args.TypeToken]; ok {
		made := f(r)
		if bad := unknownOutputs(args.TypeToken, made); len(bad) > 0 {
			return "", nil, fmt.Errorf("infratest: the mock of %s makes up outputs the provider does not have: %s", args.TypeToken, strings.Join(bad, ", "))
		}
		for k, v := range made {
			out[k] = v
		}
	}
	id := args.Name + "-id"
	if v, ok := out["id"]; ok && v.IsString() {
		id = v.StringValue()
	}
	return id, out, nil
}

// unknownOutputs are the outputs in made that the generated resource of tok
// (infra/internal/sdk, read from the provider SDK) does not have, so that a
// mock cannot feed the program an output the real provider never sends.
func unknownOutputs(tok string, made resource.PropertyMap) []string {
	s := pulumix.SchemaOf(tok)
	if s == nil {
		return []string{"(no generated resource of this type)"}
	}
	var bad []string
	for k := range made {
		if k != "id" && !slices.Contains(s.Outputs, string(k)) {
			bad = append(bad, string(k))
		}
	}
	sort.Strings(bad)
	return bad
}

// urn is the URN the engine gives a resource: the parent's qualified type,
// '$', the resource's type, for children of anything but the stack.
func urn(parent, tok, name string) string {
	// urn:pulumi:<stack>::<project>::<qualified type>::<name>
	parts := strings.SplitN(parent, "::", 4)
	if len(parts) != 4 {
		return fmt.Sprintf("urn:pulumi:unknown::%s::%s::%s", Project, tok, name)
	}
	qualified := tok
	if parts[2] != "pulumi:pulumi:Stack" {
		qualified = parts[2] + "$" + tok
	}
	return fmt.Sprintf("%s::%s::%s::%s", parts[0], parts[1], qualified, name)
}

// customResource reports whether tok is a Kubernetes custom resource
// (kubernetes:<group>/<version>:<Kind> of a group outside the provider's
// schema: Karpenter's, KEDA's, runnerfleet's own), which the provider
// accepts for any installed CRD. Their shape is checked by the tests that
// apply them to a real kube-apiserver.
func customResource(tok string) bool {
	if !strings.HasPrefix(tok, "kubernetes:") {
		return false
	}
	group, _, _ := strings.Cut(strings.TrimPrefix(tok, "kubernetes:"), "/")
	return strings.Contains(group, ".") && !strings.HasSuffix(group, ".k8s.io") && group != "helm.sh"
}

// Call answers an invoke.
func (m *Mocks) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) {
	if f, ok := m.Calls[args.Token]; ok {
		return f(args.Args)
	}
	return nil, fmt.Errorf("infratest: no mock for invoke %s", args.Token)
}

// Resources returns every registration, in order.
func (m *Mocks) Resources() []Resource {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.resources)
}

// ByToken returns the registrations of one type token.
func (m *Mocks) ByToken(tok string) []Resource {
	var out []Resource
	for _, r := range m.Resources() {
		if r.Token == tok {
			out = append(out, r)
		}
	}
	return out
}

// Get returns the one registration of tok named name, failing t without it.
func (m *Mocks) Get(t testing.TB, tok, name string) Resource {
	t.Helper()
	var names []string
	for _, r := range m.ByToken(tok) {
		if r.Name == name {
			return r
		}
		names = append(names, r.Name)
	}
	sort.Strings(names)
	t.Fatalf("no %s named %q; registered: %v", tok, name, names)
	return Resource{}
}

// Problems returns the schema problems found so far.
func (m *Mocks) Problems() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.problems)
}

// Run runs program under the mocks for the stack with the given config
// (full keys, "runnerfleet:fleet"; objects as JSON, as Pulumi passes them).
func Run(m *Mocks, stack string, config map[string]string, secretKeys []string, program pulumi.RunFunc) error {
	return pulumi.RunErr(program, pulumi.WithMocks(Project, stack, m), func(info *pulumi.RunInfo) {
		info.Config = config
		info.ConfigSecretKeys = secretKeys
	})
}

// StackConfig reads a Pulumi.<stack>.yaml and returns its config the way the
// Pulumi engine hands it to a program: every value as a string, objects and
// arrays as JSON. Secure values ({secure: …}) cannot be decrypted here; the
// test supplies them in secrets (full key to plain value).
func StackConfig(path string, secrets map[string]string) (map[string]string, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var f struct {
		Config map[string]any `json:"config"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]string{}
	var secretKeys []string
	for k, v := range f.Config {
		if !strings.Contains(k, ":") {
			k = Project + ":" + k
		}
		switch x := v.(type) {
		case string:
			out[k] = x
		case map[string]any:
			if _, ok := x["secure"]; ok && len(x) == 1 {
				plain, ok := secrets[k]
				if !ok {
					return nil, nil, fmt.Errorf("%s: %s is a secret: give the test its plain value", path, k)
				}
				out[k] = plain
				secretKeys = append(secretKeys, k)
				continue
			}
			j, _ := json.Marshal(x)
			out[k] = string(j)
		default:
			j, _ := json.Marshal(x)
			out[k] = string(j)
		}
	}
	for k, v := range secrets {
		if _, ok := out[k]; !ok {
			out[k] = v
			secretKeys = append(secretKeys, k)
		}
	}
	sort.Strings(secretKeys)
	return out, secretKeys, nil
}

// MockAutonameSuffix is the random part the mocks give an autonamed
// Kubernetes object: 8 characters, as the provider draws them.
const MockAutonameSuffix = "mock1a2b"

// DefaultOutputs are the outputs the providers compute that the program
// reads, made up in the providers' formats.
func DefaultOutputs() map[string]func(r Resource) resource.PropertyMap {
	str := resource.NewStringProperty
	arn := func(service, kind string) func(r Resource) resource.PropertyMap {
		return func(r Resource) resource.PropertyMap {
			name := r.Name
			if v := r.Input("name"); v.IsString() {
				name = v.StringValue()
			}
			return resource.PropertyMap{
				"arn":  str(fmt.Sprintf("arn:aws:%s::123456789012:%s%s", service, kind, name)),
				"name": str(name),
			}
		}
	}
	return map[string]func(r Resource) resource.PropertyMap{
		// IAM puts a role's path into its ARN.
		"aws:iam/role:Role": func(r Resource) resource.PropertyMap {
			name := r.Name
			if v := r.Input("name"); v.IsString() {
				name = v.StringValue()
			}
			path := "/"
			if v := r.Input("path"); v.IsString() {
				path = v.StringValue()
			}
			return resource.PropertyMap{"arn": str("arn:aws:iam::123456789012:role" + path + name), "name": str(name)}
		},
		"aws:iam/policy:Policy":                   arn("iam", "policy/"),
		"aws:iam/instanceProfile:InstanceProfile": arn("iam", "instance-profile/"),
		"aws:iam/openIdConnectProvider:OpenIdConnectProvider": func(r Resource) resource.PropertyMap {
			return resource.PropertyMap{"arn": str("arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE")}
		},
		"aws:sqs/queue:Queue": func(r Resource) resource.PropertyMap {
			name := r.Name
			if v := r.Input("name"); v.IsString() {
				name = v.StringValue()
			}
			return resource.PropertyMap{
				"arn": str("arn:aws:sqs:eu-west-1:123456789012:" + name),
				"url": str("https://sqs.eu-west-1.amazonaws.com/123456789012/" + name),
			}
		},
		"aws:eks/cluster:Cluster": func(r Resource) resource.PropertyMap {
			return resource.PropertyMap{
				"arn":      str("arn:aws:eks:eu-west-1:123456789012:cluster/" + r.Name),
				"endpoint": str("https://EXAMPLED539D4633E53DE1B71EXAMPLE.gr7.eu-west-1.eks.amazonaws.com"),
				"certificateAuthority": resource.NewObjectProperty(resource.PropertyMap{
					"data": str("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="),
				}),
				"identities": resource.NewArrayProperty([]resource.PropertyValue{resource.NewObjectProperty(resource.PropertyMap{
					"oidcs": resource.NewArrayProperty([]resource.PropertyValue{resource.NewObjectProperty(resource.PropertyMap{
						"issuer": str("https://oidc.eks.eu-west-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"),
					})}),
				})}),
			}
		},
		// S3 names a bucket declared without one from its prefix or the
		// resource name and a random suffix.
		"aws:s3/bucketV2:BucketV2": func(r Resource) resource.PropertyMap {
			name := r.Name + "-20261130a1b2c3d4"
			if v := r.Input("bucket"); v.IsString() {
				name = v.StringValue()
			} else if v := r.Input("bucketPrefix"); v.IsString() {
				name = v.StringValue() + "20261130a1b2c3d4"
			}
			return resource.PropertyMap{"bucket": str(name), "arn": str("arn:aws:s3:::" + name)}
		},
		"gcp:serviceaccount/account:Account": func(r Resource) resource.PropertyMap {
			id, project := r.Input("accountId"), r.Input("project")
			if !id.IsString() || !project.IsString() {
				return nil
			}
			email := id.StringValue() + "@" + project.StringValue() + ".iam.gserviceaccount.com"
			return resource.PropertyMap{"email": str(email), "member": str("serviceAccount:" + email), "name": str("projects/" + project.StringValue() + "/serviceAccounts/" + email)}
		},
		// A custom role's name is its project's and role ID's, as GCP
		// gives it.
		"gcp:projects/iAMCustomRole:IAMCustomRole": func(r Resource) resource.PropertyMap {
			id, project := r.Input("roleId"), r.Input("project")
			if !id.IsString() || !project.IsString() {
				return nil
			}
			return resource.PropertyMap{"name": str("projects/" + project.StringValue() + "/roles/" + id.StringValue())}
		},
		// The API server gives every object a uid (owner references
		// name it).
		"kubernetes:core/v1:Secret": func(r Resource) resource.PropertyMap {
			md := r.Input("metadata")
			if !md.IsObject() {
				return nil
			}
			out := md.ObjectValue().Copy()
			out["uid"] = str("uid-" + r.Name)
			return resource.PropertyMap{"metadata": resource.NewObjectProperty(out)}
		},
		// The provider names an object declared without a name after the
		// resource, with a random suffix (its autonaming).
		"kubernetes:core/v1:PersistentVolumeClaim": func(r Resource) resource.PropertyMap {
			md := r.Input("metadata")
			if !md.IsObject() || r.Input("metadata.name").IsString() {
				return nil
			}
			out := md.ObjectValue().Copy()
			out["name"] = str(r.Name + "-" + MockAutonameSuffix)
			return resource.PropertyMap{"metadata": resource.NewObjectProperty(out)}
		},
		"gcp:container/cluster:Cluster": func(r Resource) resource.PropertyMap {
			return resource.PropertyMap{
				"endpoint": str("203.0.113.10"),
				"masterAuth": resource.NewObjectProperty(resource.PropertyMap{
					"clusterCaCertificate": str("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="),
				}),
			}
		},
	}
}
