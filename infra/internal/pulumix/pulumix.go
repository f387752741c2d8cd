// Package pulumix is the runtime of the typed provider resources generated
// into infra/internal/sdk: Declare does what an SDK constructor does
// (required inputs, constants, secrets, aliases, the pinned provider
// version) for typed Args, and Decode fills typed Args from plain values
// (an unstructured Kubernetes object).
//
// runnerfleet does not compile the real AWS, GCP and Kubernetes SDKs (see
// infra/sdkschema for why).
package pulumix

import (
	"fmt"
	"maps"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	corev1 "k8s.io/api/core/v1"
)

// Provider plugin versions, without the leading v. AWS and GCP match the SDK
// module versions in infra/sdkschema.Modules, whose schemas the mock tests
// check. The Kubernetes provider is the plugin hack/tools.sh builds from
// pulumi-kubernetes/provider/v4 at the only version the module proxy serves,
// a commit of 2026-01-15 named by its Go pseudo-version (a test keeps it
// equal to hack/pulumi-kubernetes/go.mod); its schema is checked against the
// SDK the plugin is built with, v4.29.0 (hack/pulumi-kubernetes/go.mod).
var Versions = map[string]string{
	"aws":        "6.83.4",
	"gcp":        "9.6.0",
	"kubernetes": "4.0.0-20260115033456-f47bc2d6f199",
}

// Strings turns a Go string slice into a pulumi.StringArray.
func Strings(ss []string) pulumi.StringArray {
	out := make(pulumi.StringArray, len(ss))
	for i, s := range ss {
		out[i] = pulumi.String(s)
	}
	return out
}

// StringMap turns a Go map into a pulumi.StringMap.
func StringMap(m map[string]string) pulumi.StringMap {
	out := make(pulumi.StringMap, len(m))
	for k, v := range m {
		out[k] = pulumi.String(v)
	}
	return out
}

// ToInput turns a tree of Go values (maps, slices, strings, bools and
// numbers, as encoding/json or an unstructured object holds them) and Pulumi
// inputs into inputs. nil map entries are dropped.
func ToInput(v any) pulumi.Input {
	switch x := v.(type) {
	case pulumi.Input:
		return x
	case map[string]any:
		m := make(pulumi.Map, len(x))
		for k, e := range x {
			if e != nil {
				m[k] = ToInput(e)
			}
		}
		return m
	case []any:
		a := make(pulumi.Array, len(x))
		for i, e := range x {
			a[i] = ToInput(e)
		}
		return a
	case string:
		return pulumi.String(x)
	case bool:
		return pulumi.Bool(x)
	case int:
		return pulumi.Int(x)
	case int64:
		return pulumi.Int(int(x))
	case float64:
		return pulumi.Float64(x)
	}
	panic(fmt.Sprintf("pulumix: no input for a %T", v))
}

// Merge returns the union of the maps; later ones win.
func Merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// CloudTaintEffect is a Kubernetes taint effect as EKS node groups and GKE
// node pools spell it (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE).
func CloudTaintEffect(e corev1.TaintEffect) string {
	switch e {
	case corev1.TaintEffectNoSchedule:
		return "NO_SCHEDULE"
	case corev1.TaintEffectPreferNoSchedule:
		return "PREFER_NO_SCHEDULE"
	case corev1.TaintEffectNoExecute:
		return "NO_EXECUTE"
	}
	panic(fmt.Sprintf("pulumix: unknown taint effect %q", e))
}
