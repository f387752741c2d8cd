package sharedfleet

import (
	"regexp"
	"strings"
	"testing"
)

// gcpAccountID is GCP's rule for a service account ID.
var gcpAccountID = regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)

// gc's account IDs are valid GCP account IDs for every namespace length,
// and distinct across namespaces whose cut agrees and across clusters.
func TestGCAccountIDIsValidAndUnique(t *testing.T) {
	long := strings.Repeat("a", 40)
	seen := map[string]string{}
	for _, tc := range []struct{ cluster, ns string }{
		{"c", "p"}, {"c", "production"}, {"d", "production"}, {"c", long}, {"c", long + "b"},
		{"c", strings.Repeat("a", 19) + "-b"}, {"c", strings.Repeat("a", 19) + "-c"},
	} {
		id := GCAccountID(tc.cluster, tc.ns)
		if !gcpAccountID.MatchString(id) {
			t.Errorf("GCAccountID(%q, %q) = %q: not a GCP service account ID", tc.cluster, tc.ns, id)
		}
		key := tc.cluster + "/" + tc.ns
		if other, dup := seen[id]; dup {
			t.Errorf("%s and %s share gc account %s", key, other, id)
		}
		seen[id] = key
	}
}
