//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// nodeLife is when a job node came and went.
type nodeLife struct {
	pool          string
	created, gone time.Time
}

// The local stack with two teams runs each team's demo jobs on nodes
// Karpenter launches for its own NodePool; fleet cost, from the local
// Prometheus' recording rules, gives each team its own node-seconds, and
// they add up to the nodes that existed (as the test saw them come and
// go), each to within a step of the rules per node; each team's nodes are
// priced (the kwok provider's prices).
func TestTwoTeamsGetTheirOwnNodeSecondsAndCost(t *testing.T) {
	onRealNode(t) // fleet up --stack local starts the control plane and the real node
	root := repoRoot(t)
	bin := buildBinaries(t, root)
	state := stateDir(t)

	// stacks/Pulumi.local.yaml with a second team.
	b, err := os.ReadFile(filepath.Join(root, "stacks", "Pulumi.local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Config map[string]any `json:"config"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	fleetCfg := doc.Config["runnerfleet:fleet"].(map[string]any)
	teams := fleetCfg["teams"].([]any)
	teamB := map[string]any{}
	for k, v := range teams[0].(map[string]any) {
		teamB[k] = v
	}
	teamB["namespace"], teamB["tags"], teamB["tokenConfigKey"] = "team-b", []string{"team-b"}, "teamBBuildToken"
	fleetCfg["teams"] = append(teams, teamB)
	doc.Config["runnerfleet:teamBBuildToken"] = "glrt-EXAMPLE-placeholder-team-b-token"
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	stackFile := filepath.Join(state, "two-teams.yaml")
	if err := os.WriteFile(stackFile, out, 0o600); err != nil {
		t.Fatal(err)
	}

	fleet := func(timeout time.Duration, args ...string) string {
		t.Helper()
		return run(t, root, timeout, filepath.Join(bin, "fleet"), append(args, "--state-dir", state)...)
	}
	t.Cleanup(func() { fleet(5*time.Minute, "down", "--stack", "local", "--config", stackFile) })
	start := time.Now()
	fleet(8*time.Minute, "up", "--stack", "local", "--config", stackFile, "--timeout", "4m", "--demo-jobs", "2", "--demo-duration", "90s")
	t.Logf("fleet up with two teams took %s", time.Since(start).Round(time.Second))

	// Follow the job nodes of both teams' NodePools, from their creation
	// (the API server's record) until the test no longer sees them.
	c := clientFor(t, filepath.Join(state, "kubeconfig"))
	team := map[string]string{naming.For("team-a", "build").Capacity(): "team-a", naming.For("team-b", "build").Capacity(): "team-b"}
	var mu sync.Mutex
	lives := map[string]*nodeLife{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var following sync.WaitGroup
	following.Add(1)
	go func() {
		defer following.Done()
		for ctx.Err() == nil {
			nodes := &corev1.NodeList{}
			if err := c.List(ctx, nodes); err == nil {
				now := time.Now()
				seen := map[string]bool{}
				mu.Lock()
				for _, n := range nodes.Items {
					pool := n.Labels[karpv1.NodePoolLabelKey]
					if _, ok := team[pool]; !ok {
						continue
					}
					seen[n.Name] = true
					if lives[n.Name] == nil {
						lives[n.Name] = &nodeLife{pool: pool, created: n.CreationTimestamp.Time}
					}
				}
				for name, l := range lives {
					if !seen[name] && l.gone.IsZero() {
						l.gone = now
					}
				}
				mu.Unlock()
			}
			time.Sleep(time.Second)
		}
	}()
	count := func() (seen map[string]int, alive int) {
		mu.Lock()
		defer mu.Unlock()
		seen = map[string]int{}
		for _, l := range lives {
			seen[team[l.pool]]++
			if l.gone.IsZero() {
				alive++
			}
		}
		return seen, alive
	}
	waitFor(t, 4*time.Minute, "a job node of each team", func() error {
		if seen, _ := count(); seen["team-a"] == 0 || seen["team-b"] == 0 {
			return fmt.Errorf("job nodes seen by team: %v", seen)
		}
		return nil
	})
	waitFor(t, 8*time.Minute, "every job node gone once the demo jobs ended", func() error {
		if _, alive := count(); alive > 0 {
			return fmt.Errorf("%d job node(s) left", alive)
		}
		return nil
	})
	stop()
	following.Wait()

	want := map[string]float64{}
	nodes := map[string]int{}
	var lastGone time.Time
	for name, l := range lives {
		if l.gone.After(lastGone) {
			lastGone = l.gone
		}
		d := l.gone.Sub(l.created).Seconds()
		want[team[l.pool]] += d
		nodes[team[l.pool]]++
		t.Logf("node %s of %s: %s to %s (%.0fs)", name, team[l.pool], l.created.Format(time.TimeOnly), l.gone.Format(time.TimeOnly), d)
	}

	// The rules sample every CostStep: wait until they have recorded the
	// last node gone, then ask fleet cost as a user would.
	st, err := localcluster.ReadState(state)
	if err != nil || st == nil || st.Endpoints[localcluster.Prometheus] == "" {
		t.Fatalf("no local Prometheus in %s (%v)", state, err)
	}
	waitRulesAfter(t, st.Endpoints[localcluster.Prometheus], lastGone)
	var rep struct {
		Teams []struct {
			Namespace   string             `json:"namespace"`
			NodeSeconds float64            `json:"nodeSeconds"`
			Cost        map[string]float64 `json:"cost"`
			Unpriced    []string           `json:"unpriced"`
		} `json:"teams"`
	}
	raw := fleet(time.Minute, "cost", "--since", "1h", "-o", "json")
	if err := json.Unmarshal([]byte(raw), &rep); err != nil {
		t.Fatalf("fleet cost -o json: %v\n%s", err, raw)
	}
	got := map[string]float64{}
	var total, totalWant float64
	for _, tm := range rep.Teams {
		got[tm.Namespace] = tm.NodeSeconds
		total += tm.NodeSeconds
		if len(tm.Unpriced) > 0 || tm.Cost["USD"] <= 0 {
			t.Errorf("team %s: cost %v, unpriced %v: want a price for every node", tm.Namespace, tm.Cost, tm.Unpriced)
		}
	}
	step := monitoring.CostStep.Seconds()
	for _, tm := range []string{"team-a", "team-b"} {
		totalWant += want[tm]
		// Each node is counted at the rules' evaluations while it exists:
		// its lifetime to within one step, plus the scrape's lag.
		tolerance := step*float64(nodes[tm]) + 20
		t.Logf("%s: %d node(s), %.0f node-seconds by their lifetimes, %.0f by fleet cost (tolerance %.0f)", tm, nodes[tm], want[tm], got[tm], tolerance)
		if got[tm] <= 0 || math.Abs(got[tm]-want[tm]) > tolerance {
			t.Errorf("%s: fleet cost says %.0f node-seconds, its nodes lived %.0f (±%.0f)", tm, got[tm], want[tm], tolerance)
		}
	}
	if len(got) != 2 {
		t.Errorf("fleet cost names teams %v, want team-a and team-b", got)
	}
	t.Logf("all teams: %.0f node-seconds by fleet cost, %.0f by the nodes' lifetimes", total, totalWant)
}

// waitRulesAfter waits until the Prometheus at url has scraped every target
// after since and then evaluated the cost rules: from then on the
// recorded node series hold what existed at since, and no later step adds
// to a node gone by then. (Waiting two steps instead cost the suite about
// 100 s more on average.)
func waitRulesAfter(t *testing.T, url string, since time.Time) {
	t.Helper()
	pc, err := promapi.NewClient(promapi.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	api := promv1.NewAPI(pc)
	ctx := context.Background()
	var scraped time.Time // every target scraped after since, the latest of those scrapes
	waitFor(t, 2*monitoring.CostStep+time.Minute, fmt.Sprintf("the cost rules evaluated after a scrape past %s", since.Format(time.TimeOnly)), func() error {
		if scraped.IsZero() {
			tr, err := api.Targets(ctx)
			if err != nil {
				return err
			}
			if len(tr.Active) == 0 {
				return errors.New("no active targets")
			}
			var latest time.Time
			for _, tg := range tr.Active {
				if !tg.LastScrape.After(since) {
					return fmt.Errorf("target %s last scraped at %s", tg.ScrapeURL, tg.LastScrape.Format(time.TimeOnly))
				}
				if tg.LastScrape.After(latest) {
					latest = tg.LastScrape
				}
			}
			scraped = latest
		}
		rules, err := api.Rules(ctx, nil)
		if err != nil {
			return err
		}
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if rr, ok := r.(promv1.RecordingRule); ok && g.Name == monitoring.CostGroupName && rr.Name == monitoring.RecordNodes {
					if !rr.LastEvaluation.After(scraped) {
						return fmt.Errorf("%s last evaluated at %s, before the scrape at %s", rr.Name, rr.LastEvaluation.Format(time.TimeOnly), scraped.Format(time.TimeOnly))
					}
					t.Logf("%s evaluated at %s, %.0f s after the last node went", rr.Name, rr.LastEvaluation.Format(time.TimeOnly), rr.LastEvaluation.Sub(since).Seconds())
					return nil
				}
			}
		}
		return fmt.Errorf("no recording rule %s in group %s", monitoring.RecordNodes, monitoring.CostGroupName)
	})
}
