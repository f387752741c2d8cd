package stackconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Strict's fast way (one strict decode) gives the same fleet as its long
// way (the generic tree, the key walk, the decode) for every stack file of
// the repository and a stack of many teams.
func TestStrictReadsTheSameFleetTheFastWayAndTheLongWay(t *testing.T) {
	raws := map[string][]byte{"50 teams": fleetOf(50)}
	files, err := filepath.Glob("../../stacks/Pulumi.*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no stack files: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := StackFile(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		raws[f] = cfg["runnerfleet:"+Key]
	}
	for name, raw := range raws {
		var fast, long Fleet
		if !decodedAsIs(raw, &fast) && hasFastWay {
			t.Errorf("%s: not read the fast way", name)
		}
		if errs, ok := strictLong(raw, &long, Root); !ok || len(errs) > 0 {
			t.Fatalf("%s: %v", name, errs)
		}
		if hasFastWay && !reflect.DeepEqual(fast, long) {
			t.Errorf("%s: the fast way read\n%s\nthe long way\n%s", name, fast.JSON(), long.JSON())
		}
	}
}

// Each problem Strict reports stops its fast way on its own, so that the
// long way names it: a key in the wrong case (encoding/json would take
// it), a key given twice (encoding/json keeps the last), an unknown key, a
// value of the wrong type.
func TestStrictsFastWayStopsAtEveryProblemItReports(t *testing.T) {
	good := string(fleetOf(3))
	for _, tc := range []struct{ from, to, want string }{
		{`"gitlabURL"`, `"gitlabUrl"`, `runnerfleet:fleet.gitlabUrl: Forbidden: unknown key; did you mean "gitlabURL"?`},
		{`"jobs":{"image"`, `"Jobs":{"image"`, `runnerfleet:fleet.teams[0].Jobs: Forbidden: unknown key`},
		{`"replicas":2`, `"replicas":2,"replicas":3`, `runnerfleet:fleet.teams[0].managers.replicas: Duplicate value: "replicas": given more than once`},
		{`"limits":{"cpu":"64"}`, `"limits":{"cpu":"64","cpu":"32"}`, `runnerfleet:fleet.teams[0].capacity.limits.cpu: Duplicate value`},
		{`"concurrent":4`, `"concurent":4`, `runnerfleet:fleet.teams[0].managers.concurent: Forbidden: unknown key; did you mean "concurrent"?`},
		{`"concurrent":4`, `"concurrent":"4"`, `runnerfleet:fleet.teams[0].managers.concurrent: Invalid value: "string": want a whole number`},
	} {
		raw := strings.Replace(good, tc.from, tc.to, 1)
		var f Fleet
		if decodedAsIs([]byte(raw), &f) {
			t.Errorf("%s: read the fast way", tc.to)
		}
		_, err := Decode([]byte(raw), "dev")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error does not report %q:\n%v", tc.to, tc.want, err)
		}
	}
}
