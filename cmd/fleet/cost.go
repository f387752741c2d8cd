package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/metrics"
	"github.com/runnerfleet/runnerfleet/runnerset/monitoring"
)

type costOptions struct {
	since      string
	prometheus string
	stateDir   string
	output     string
}

// costReport is fleet cost -o json.
type costReport struct {
	Prometheus   string      `json:"prometheus"`
	Since        string      `json:"since"`
	Until        time.Time   `json:"until"`
	Teams        []costTeam  `json:"teams"`
	SharedFleets []costFleet `json:"sharedFleets,omitempty"`
}

// costTeam is one namespace's RunnerSets.
type costTeam struct {
	Namespace   string    `json:"namespace"`
	Rows        []costRow `json:"rows"`
	NodeSeconds float64   `json:"nodeSeconds"`
	// Cost by currency; instance types without a price are left out and
	// named in Unpriced.
	Cost     map[string]float64 `json:"cost"`
	Unpriced []string           `json:"unpriced,omitempty"`
}

// costFleet is one shared fleet's groups.
type costFleet struct {
	Fleet       string             `json:"fleet"`
	Rows        []costRow          `json:"rows"`
	NodeSeconds float64            `json:"vmSeconds"`
	Cost        map[string]float64 `json:"cost"`
	Unpriced    []string           `json:"unpriced,omitempty"`
}

// costRow is one RunnerSet's (or shared fleet group's) capacity of one
// capacity type and instance type.
type costRow struct {
	Name         string  `json:"name"`
	CapacityType string  `json:"capacityType"`
	InstanceType string  `json:"instanceType"`
	Seconds      float64 `json:"seconds"`
	// Cost is nil when the price table has no price for the type.
	Cost     *float64 `json:"cost,omitempty"`
	Currency string   `json:"currency,omitempty"`
}

func costCmd(stdout, stderr io.Writer) *cobra.Command {
	var o costOptions
	cmd := &cobra.Command{
		Use:     "cost",
		GroupID: "stack",
		Short:   "What each team's runners cost: node-hours and money per RunnerSet, and the shared fleets' VM-hours",
		Long: `fleet cost asks Prometheus what each team's runners cost over --since: for
every RunnerSet, the node-hours of its capacity by capacity type (spot,
on-demand) and instance type, and what they cost by the price table (the
stack config's cost.prices over the defaults), one table per team
(namespace); and the same for the shared fleets' VM groups when their
Prometheus records them. The figures are runnerfleet's recording rules
integrated over the window (docs/operations/cost.md).

Without --prometheus it asks the local stack's Prometheus.`,
		Example: `  fleet cost --since 7d
  fleet cost --since 30d --prometheus http://prometheus.monitoring.svc:9090 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "table" && o.output != "json" {
				return fmt.Errorf("-o %q: want table or json", o.output)
			}
			if d, err := model.ParseDuration(o.since); err != nil || d <= 0 {
				return fmt.Errorf("--since %q: want a positive Prometheus duration, such as 7d, 12h or 30d", o.since)
			}
			if o.prometheus == "" {
				s, err := newLocalStack(common{stack: stackLocal, stateDir: o.stateDir}, stdout, stderr)
				if err != nil {
					return err
				}
				st, err := localcluster.ReadState(s.dir)
				if err != nil {
					return err
				}
				if st == nil || st.Endpoints[localcluster.Prometheus] == "" {
					return fmt.Errorf("no local stack's Prometheus in %s: bring the local stack up (fleet up), or give the Prometheus to ask with --prometheus URL", s.dir)
				}
				o.prometheus = st.Endpoints[localcluster.Prometheus]
			}
			rep, err := queryCost(cmd.Context(), o.prometheus, o.since, time.Now())
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(stdout, rep)
			}
			printCost(stdout, rep)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.since, "since", "7d", "the window to add up, ending now (a Prometheus duration: 7d, 12h, 30d)")
	cmd.Flags().StringVar(&o.prometheus, "prometheus", "", "the Prometheus to ask (its URL); default the local stack's")
	cmd.Flags().StringVar(&o.stateDir, "state-dir", "", "where the local stack keeps its state, to find its Prometheus (default <checkout>/.local/local, else ~/.local/state/runnerfleet/local)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "table or json")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// Labels the cost queries group by.
var (
	teamKeys  = []string{metrics.LabelNamespace, metrics.LabelRunnerSet, metrics.LabelCapacityType, metrics.LabelInstanceType}
	fleetKeys = []string{monitoring.LabelFleet, monitoring.LabelGroup, metrics.LabelCapacityType, metrics.LabelInstanceType}
)

// queryCost asks the Prometheus at addr for the node-seconds and cost of
// every RunnerSet and shared fleet group over since, ending at until.
func queryCost(ctx context.Context, addr, since string, until time.Time) (*costReport, error) {
	c, err := promapi.NewClient(promapi.Config{Address: addr})
	if err != nil {
		return nil, fmt.Errorf("--prometheus %q: %w", addr, err)
	}
	prom := promv1.NewAPI(c)
	query := func(q string) (model.Vector, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		v, _, err := prom.Query(ctx, q, until)
		if err != nil {
			return nil, fmt.Errorf("asking Prometheus at %s %s: %w", addr, q, err)
		}
		vec, ok := v.(model.Vector)
		if !ok {
			return nil, fmt.Errorf("Prometheus at %s answered %s with a %s, want a vector", addr, q, v.Type())
		}
		return vec, nil
	}
	rep := &costReport{Prometheus: addr, Since: since, Until: until.UTC().Truncate(time.Second), Teams: []costTeam{}}
	by := strings.Join(teamKeys, ", ")
	secs, err := query(monitoring.NodeSeconds("", by, since))
	if err != nil {
		return nil, err
	}
	spent, err := query(monitoring.Spent("", by, since))
	if err != nil {
		return nil, err
	}
	teams := map[string]*costTeam{}
	for _, r := range costRows(secs, spent, teamKeys) {
		ns := r.key[0]
		t := teams[ns]
		if t == nil {
			t = &costTeam{Namespace: ns, Cost: map[string]float64{}}
			teams[ns] = t
		}
		t.Rows = append(t.Rows, r.row)
		t.NodeSeconds += r.row.Seconds
		if r.row.Cost != nil {
			t.Cost[r.row.Currency] += *r.row.Cost
		} else {
			t.Unpriced = append(t.Unpriced, r.row.CapacityType+" "+r.row.InstanceType)
		}
	}
	for _, ns := range sortedKeys(teams) {
		rep.Teams = append(rep.Teams, *teams[ns])
	}

	by = strings.Join(fleetKeys, ", ")
	if secs, err = query(monitoring.VMSeconds("", by, since)); err != nil {
		return nil, err
	}
	if spent, err = query(monitoring.VMSpent("", by, since)); err != nil {
		return nil, err
	}
	fleets := map[string]*costFleet{}
	for _, r := range costRows(secs, spent, fleetKeys) {
		f := fleets[r.key[0]]
		if f == nil {
			f = &costFleet{Fleet: r.key[0], Cost: map[string]float64{}}
			fleets[r.key[0]] = f
		}
		f.Rows = append(f.Rows, r.row)
		f.NodeSeconds += r.row.Seconds
		if r.row.Cost != nil {
			f.Cost[r.row.Currency] += *r.row.Cost
		} else {
			f.Unpriced = append(f.Unpriced, r.row.CapacityType+" "+r.row.InstanceType)
		}
	}
	for _, name := range sortedKeys(fleets) {
		rep.SharedFleets = append(rep.SharedFleets, *fleets[name])
	}
	return rep, nil
}

type keyedRow struct {
	key []string
	row costRow
}

// costRows joins the seconds and the cost of each series of keys, sorted
// by them; a series with seconds and no cost has no price.
func costRows(secs, spent model.Vector, keys []string) []keyedRow {
	key := func(m model.Metric) []string {
		out := make([]string, len(keys))
		for i, k := range keys {
			out[i] = string(m[model.LabelName(k)])
		}
		return out
	}
	type spentIn struct {
		v        float64
		currency string
	}
	costs := map[string]spentIn{}
	for _, s := range spent {
		costs[strings.Join(key(s.Metric), "\x00")] = spentIn{float64(s.Value), string(s.Metric[monitoring.LabelCurrency])}
	}
	var out []keyedRow
	for _, s := range secs {
		k := key(s.Metric)
		r := costRow{Name: k[1], CapacityType: k[2], InstanceType: k[3], Seconds: float64(s.Value)}
		if m, ok := costs[strings.Join(k, "\x00")]; ok {
			v := m.v
			r.Cost, r.Currency = &v, m.currency
		}
		out = append(out, keyedRow{k, r})
	}
	slices.SortFunc(out, func(a, b keyedRow) int { return slices.Compare(a.key, b.key) })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func money(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, c := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%.2f %s", m[c], c))
	}
	return strings.Join(parts, " + ")
}

func printCost(w io.Writer, rep *costReport) {
	fmt.Fprintf(w, "Cost over the last %s, until %s (Prometheus %s)\n", rep.Since, rep.Until.Format(time.RFC3339), rep.Prometheus)
	if len(rep.Teams) == 0 {
		fmt.Fprintf(w, "\nNo RunnerSet had nodes in that window (or the cost rules have not run: %s is empty).\n", monitoring.RecordNodes)
	}
	table := func(title, name, unit string, rows []costRow, secs float64, cost map[string]float64, unpriced []string) {
		fmt.Fprintf(w, "\n%s\n", title)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tCAPACITY TYPE\tINSTANCE TYPE\t%s\tCOST\n", name, unit)
		for _, r := range rows {
			c := "no price"
			if r.Cost != nil {
				c = fmt.Sprintf("%.2f %s", *r.Cost, r.Currency)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\n", r.Name, r.CapacityType, r.InstanceType, r.Seconds/3600, c)
		}
		fmt.Fprintf(tw, "total\t\t\t%.2f\t%s\n", secs/3600, money(cost))
		_ = tw.Flush()
		if len(unpriced) > 0 {
			fmt.Fprintf(w, "No price for %s: add them to the stack config's cost.prices (docs/operations/cost.md).\n", strings.Join(unpriced, ", "))
		}
	}
	for _, t := range rep.Teams {
		table("Team "+t.Namespace, "RUNNERSET", "NODE-HOURS", t.Rows, t.NodeSeconds, t.Cost, t.Unpriced)
	}
	for _, f := range rep.SharedFleets {
		table("Shared fleet "+f.Fleet, "GROUP", "VM-HOURS", f.Rows, f.NodeSeconds, f.Cost, f.Unpriced)
	}
}
