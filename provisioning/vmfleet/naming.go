package vmfleet

import (
	"fmt"
	"maps"
	"regexp"
	"strings"

	"github.com/runnerfleet/runnerfleet/providers"
)

// Labels of autoscaled VMs: the ones a manager's docker+machine or
// fleeting plugin creates for jobs. They prove which manager owns a VM.
// The renderer (provisioning/sharedfleet) writes them and fleet gc reads
// them, both through Owner.
const (
	// LabelAutoscaled is "true" on every autoscaled VM.
	LabelAutoscaled = "runnerfleet-autoscaled"
	// LabelFleet names the fleet (the shared fleet's namespace).
	LabelFleet = "runnerfleet-fleet"
	// LabelManagerGroup names the manager group. (LabelGroup is the
	// group of manager VMs that fleet rotate rotates: a different thing,
	// so a different key.)
	LabelManagerGroup = "runnerfleet-manager-group"
	// LabelManager names the manager: a shared fleet's Helm release, or a
	// manager VM's name.
	LabelManager = "runnerfleet-manager"
	// LabelIncarnation names the manager's incarnation that created the
	// VM: the state (docker+machine's machine directory) that knows the
	// VM. A manager whose state is lost is a new incarnation, so the VMs
	// of the old one are orphans although the manager's name lives on.
	LabelIncarnation = "runnerfleet-incarnation"
	// LabelHost says where the manager runs, which tells fleet gc which
	// source can prove it exists: HostKubernetes or HostVM.
	LabelHost = "runnerfleet-host"
)

// Where managers run.
const (
	HostKubernetes = "kubernetes"
	HostVM         = "vm"
)

// IncarnationPlaceholder stands in config.toml for the manager's
// incarnation, which is known only when the manager starts: the start
// script replaces it (with the pod's name, $HOSTNAME). It is a valid label
// value, so a config rendered for checking is a valid config.
const IncarnationPlaceholder = "runnerfleet-incarnation-at-start"

// MaxManagerNameLength keeps docker+machine's VM names within GCE's 63
// characters: runner-<9 token characters>-<manager>-<unix time>-<8 hex>.
const MaxManagerNameLength = 63 - len("runner-123456789-") - len("-1700000000-deadbeef")

// FleetSelector selects the autoscaled VMs of the fleet in namespace:
// what a gc that knows only that fleet's managers may judge (fleets may
// share zones, and another fleet's VM has no manager there).
func FleetSelector(namespace string) map[string]string {
	return map[string]string{LabelAutoscaled: "true", LabelFleet: namespace}
}

// Owner is who an autoscaled VM belongs to.
type Owner struct {
	Fleet   string
	Group   string
	Manager string
	Host    string
	// Incarnation is "" when unknown (a VM labelled before incarnations,
	// or a manager that keeps its state for life, such as a VM manager
	// whose machine directory is on its boot disk).
	Incarnation string
}

// Labels are the VM labels of o (GCE labels, EC2 tags, docker+machine
// google-label, the fleeting instance template's labels).
func (o Owner) Labels() map[string]string {
	l := map[string]string{
		LabelAutoscaled:   "true",
		LabelFleet:        o.Fleet,
		LabelManagerGroup: o.Group,
		LabelManager:      o.Manager,
		LabelHost:         o.Host,
	}
	if o.Incarnation != "" {
		l[LabelIncarnation] = o.Incarnation
	}
	maps.DeleteFunc(l, func(_, v string) bool { return v == "" })
	return l
}

// Validate refuses an owner whose labels or VM names a cloud would refuse.
func (o Owner) Validate() error {
	if len(o.Manager) > MaxManagerNameLength {
		return fmt.Errorf("manager name %q is %d characters: docker+machine names its VMs runner-<token>-<manager>-<time>-<random>, which GCE allows up to 63 characters, so a manager name may have at most %d", o.Manager, len(o.Manager), MaxManagerNameLength)
	}
	for k, v := range o.Labels() {
		if !labelValueRE.MatchString(v) {
			return fmt.Errorf("label %s=%q is not a GCE label value (lower-case letters, digits, - and _, at most 63)", k, v)
		}
	}
	return nil
}

var labelValueRE = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)

// MachineName is docker+machine's MachineName of the manager: gitlab-runner
// names each VM "runner-" + the token's first 9 characters + "-" +
// MachineName with %s replaced by "<unix time>-<8 hex digits>"
// (executors/docker/machine/name.go), so the manager's VMs are
// runner-<token>-<manager>-<unix time>-<8 hex>.
func MachineName(manager string) string { return manager + "-%s" }

// MachineVMNamePrefix begins the name of every VM docker+machine creates
// for gitlab-runner; what follows it (the token's characters) varies by
// runner, so it is all of a name that IAM conditions can match on.
const MachineVMNamePrefix = "runner-"

// machineVMName matches the names docker+machine gives; its group is the manager.
var machineVMName = regexp.MustCompile(`^` + MachineVMNamePrefix + `[a-z0-9]{1,9}-([a-z0-9][a-z0-9-]*[a-z0-9])-[0-9]+-[0-9a-f]{8}$`)

// ManagerOfMachine is the manager a docker+machine VM name names, if it
// is one.
func ManagerOfMachine(vmName string) (string, bool) {
	m := machineVMName.FindStringSubmatch(vmName)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// OwnerOf is the owner of an autoscaled VM: from its labels, and when it
// has no manager label, from a docker+machine name. ok is false when
// neither says.
func OwnerOf(vm providers.Instance) (o Owner, ok bool) {
	l := vm.Labels
	o = Owner{Fleet: l[LabelFleet], Group: l[LabelManagerGroup], Manager: l[LabelManager], Host: l[LabelHost], Incarnation: l[LabelIncarnation]}
	if o.Manager == "" {
		m, ok := ManagerOfMachine(vm.Name)
		if !ok {
			return o, false
		}
		o.Manager = m
	}
	if o.Incarnation == IncarnationPlaceholder {
		// The start script did not replace it: no incarnation is known.
		o.Incarnation = ""
	}
	return o, true
}

// IncarnationOfPod is a Kubernetes-hosted manager's incarnation as its pod
// knows it ($HOSTNAME, the pod's name) and as fleet gc sees it in the
// cluster. Manager state lives in the pod (docker+machine's machine
// directory in its filesystem), so a new pod is a new incarnation.
func IncarnationOfPod(podName string) string { return strings.ToLower(podName) }
