package naming

import (
	"strings"
	"testing"
)

func TestNamesOfAShortRunnerSetAreReadable(t *testing.T) {
	r := For("team-a", "build")
	for got, want := range map[string]string{
		r.ManagerServiceAccount(): "build-manager",
		r.JobServiceAccount():     "build-job",
		r.Config():                "build-config",
		r.Managers():              "build-manager",
		r.Capacity():              "rf-team-a-build",
		r.IAMRole("prod"):         "prod-team-a-build-job",
		r.ServiceAccountSubject(): "system:serviceaccount:team-a:build-job",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestLongNamesAreCutToMaxLengthAndStayDistinct(t *testing.T) {
	long := strings.Repeat("a", 70)
	a := For("ns", long+"x").Capacity()
	b := For("ns", long+"y").Capacity()
	if len(a) > MaxLength || len(b) > MaxLength {
		t.Fatalf("names longer than %d: %q (%d), %q (%d)", MaxLength, a, len(a), b, len(b))
	}
	if a == b {
		t.Fatalf("two different RunnerSets got the same name %q", a)
	}
	if a != For("ns", long+"x").Capacity() {
		t.Fatal("naming is not deterministic")
	}
}

func TestCutNamesNeverEndInASeparator(t *testing.T) {
	// 54 characters then '-' lands the cut right on a separator.
	n := Join(strings.Repeat("b", 53)+"-", strings.Repeat("c", 20))
	if strings.Contains(n, "--") || strings.HasSuffix(n, "-") {
		t.Fatalf("bad cut: %q", n)
	}
}
