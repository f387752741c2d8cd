// Package ownership says why the controller leaves an object alone: its
// name is taken by one runnerfleet did not create for the RunnerSet. The
// writer of runnerset/controller and the token lifecycle of
// runnerset/controller/token both refuse with it.
package ownership

import "fmt"

// InTheWay is an object a RunnerSet needs whose name is taken by one
// runnerfleet did not create for it. The controller never overwrites,
// adopts or deletes such an object; the step's condition names it.
type InTheWay struct {
	Kind, Namespace, Name string
	// Owner is who holds it, when runnerfleet can tell.
	Owner string
	// RunnerSet is the RunnerSet that needs the name.
	RunnerSet string
}

func (e *InTheWay) Error() string {
	what := e.Kind + " " + e.Name
	if e.Namespace != "" {
		what = e.Kind + " " + e.Namespace + "/" + e.Name
	}
	owner := "was not created by runnerfleet for RunnerSet " + e.RunnerSet
	if e.Owner != "" {
		owner += " (it belongs to " + e.Owner + ")"
	}
	return fmt.Sprintf("%s exists and %s: runnerfleet will not overwrite or delete it; delete or rename it, or give the RunnerSet another name", what, owner)
}
