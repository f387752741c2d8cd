package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

type statusOptions struct {
	output string // table or json
}

// statusReport is fleet status -o json.
type statusReport struct {
	Stack      string            `json:"stack"`
	Cluster    string            `json:"cluster,omitempty"`
	Up         bool              `json:"up"`
	RunnerSets []runnerSetRow    `json:"runnerSets"`
	Controller *controllerStatus `json:"controller,omitempty"`
	Nodes      *nodeCount        `json:"nodes,omitempty"`
	Processes  []processRow      `json:"processes,omitempty"`
	// SharedFleets are the stack's shared fleets' manager pods, draining
	// ones included.
	SharedFleets []sharedFleetStatus `json:"sharedFleets,omitempty"`
	// Jobs are the local stack's loopback GitLab's jobs, with the region of
	// the RunnerSet that ran each.
	Jobs       []jobRow `json:"jobs,omitempty"`
	Kubeconfig string   `json:"kubeconfig,omitempty"`
}

type runnerSetRow struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Tags      []string `json:"tags"`
	Class     string   `json:"class"`
	Ready     string   `json:"ready"`
	Reason    string   `json:"reason,omitempty"`
	Message   string   `json:"message,omitempty"`
	Managers  string   `json:"managers,omitempty"`
	// Region is the RunnerSet's runnerfleet.dev/region label (a local
	// stack's teams[].region), empty when it has none.
	Region   string `json:"region,omitempty"`
	RunnerID int64  `json:"runnerID,omitempty"`
	Age      string `json:"age"`
}

// jobRow is a loopback GitLab job with the region of its RunnerSet.
type jobRow struct {
	gitlabserver.ControlJob
	Region string `json:"region,omitempty"`
}

// runnerSetRegions maps each RunnerSet (namespace/name, as fleet names its
// runner in the loopback GitLab) to its region, def when it names none.
func runnerSetRegions(rows []runnerSetRow, def string) map[string]string {
	out := map[string]string{}
	for _, r := range rows {
		out[r.Namespace+"/"+r.Name] = cmp.Or(r.Region, def)
	}
	return out
}

type controllerStatus struct {
	Namespace string `json:"namespace"`
	Image     string `json:"image"`
	Ready     string `json:"ready"`
}

type nodeCount struct {
	Total int `json:"total"`
	Ready int `json:"ready"`
	// Real is the local stack's real node (containerd and a kubelet on this
	// machine), where managers run as real containers; empty when none.
	Real      string `json:"realNode,omitempty"`
	RealReady bool   `json:"realNodeReady,omitempty"`
}

func (n *nodeCount) realNode() string {
	if n.Real == "" {
		return "no real node"
	}
	return fmt.Sprintf("%s (containerd + kubelet on this machine, Ready=%v): managers run there as real containers", n.Real, n.RealReady)
}

// kwok counts the fake nodes: everything but the real one.
func (n *nodeCount) kwok() int {
	if n.Real != "" {
		return n.Total - 1
	}
	return n.Total
}

type processRow struct {
	Name     string `json:"name"`
	Running  bool   `json:"running"`
	PID      int    `json:"pid,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Log      string `json:"log"`
}

// scheme has the kinds fleet reads and writes.
func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// runnerSetRows are the RunnerSets of every namespace, sorted.
func runnerSetRows(ctx context.Context, c client.Client) ([]runnerSetRow, error) {
	list := &v1alpha1.RunnerSetList{}
	if err := c.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) {
			return []runnerSetRow{}, nil
		}
		return nil, fmt.Errorf("listing RunnerSets: %w", err)
	}
	rows := []runnerSetRow{}
	for _, rs := range list.Items {
		r := runnerSetRow{Namespace: rs.Namespace, Name: rs.Name, Tags: rs.Spec.Tags, Class: rs.Spec.ClassName, Ready: "Unknown",
			Managers: rs.Status.Managers, Region: rs.Labels[naming.LabelRegion], RunnerID: rs.Status.RunnerID, Age: age(rs.CreationTimestamp.Time)}
		if cond := meta.FindStatusCondition(rs.Status.Conditions, v1alpha1.ConditionReady); cond != nil {
			r.Ready, r.Reason, r.Message = string(cond.Status), cond.Reason, cond.Message
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].Namespace+"/"+rows[i].Name < rows[j].Namespace+"/"+rows[j].Name
	})
	return rows, nil
}

// printRunnerSetTable prints the columns of kubectl get runnersets -A.
func printRunnerSetTable(w io.Writer, rows []runnerSetRow) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "No RunnerSets: add a team to the stack config and run fleet up again, or apply one (examples/)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tTAGS\tCLASS\tREADY\tMANAGERS\tREASON\tAGE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, strings.Join(r.Tags, ","), r.Class, r.Ready, dash(r.Managers), dash(r.Reason), r.Age)
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
