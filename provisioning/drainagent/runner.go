package drainagent

// DefaultProcessName is the executable the agent looks for on Unix, and
// DefaultServiceName the service it stops on Windows.
const (
	DefaultProcessName = "gitlab-runner"
	DefaultServiceName = "gitlab-runner"
)

// RunnerOptions says how to find the runner. NewRunnerControl reads what
// applies to the OS it is built for: on Linux PID, PIDFile and ProcessName,
// on Windows ServiceName.
type RunnerOptions struct {
	// PID is the runner's process ID (Linux).
	PID int
	// PIDFile holds the runner's process ID, optionally followed by its
	// start time as field 22 of /proc/<pid>/stat (Linux).
	PIDFile string
	// ProcessName is the runner's executable name: a process running it
	// with the argument "run" is the runner (Linux). Used when PID and
	// PIDFile do not name a live runner.
	ProcessName string
	// ServiceName is the runner's Windows service.
	ServiceName string
}
