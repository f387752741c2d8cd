package main

import "context"

// serviceState is a state the agent reports to Windows' service control
// manager; service_windows.go maps it to svc.Status.
type serviceState int

const (
	serviceStartPending serviceState = iota
	serviceRunning                   // accepts stop and shutdown
	serviceStopPending
)

func (s serviceState) String() string {
	return [...]string{"StartPending", "Running", "StopPending"}[s]
}

// serviceRequest is what serveService does with a request of the service
// control manager; service_windows.go classifies svc.ChangeRequest.
type serviceRequest int

const (
	requestIgnored     serviceRequest = iota
	requestInterrogate                // answer with the current status
	requestStop                       // a service stop or a shutdown
)

// serveService is the Windows service's life, free of the service API so
// that every OS tests it: it reports start pending, starts the agent (run),
// reports running, and then answers interrogations (answer), turns a stop or
// shutdown into stop pending and cancels the agent (the agent, not the
// drain: a drained runner stays stopped), and when the agent returns reports
// stop pending and returns its exit code (exitCode: 0 after done or a stop).
// R is the service API's request type and kind classifies it.
func serveService[R any](run func(context.Context) error, req <-chan R, kind func(R) serviceRequest, answer func(R), report func(serviceState)) int {
	report(serviceStartPending)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	report(serviceRunning)
	for {
		select {
		case err := <-done:
			code := exitCode(ctx, err)
			report(serviceStopPending)
			return code
		case r := <-req:
			switch kind(r) {
			case requestInterrogate:
				answer(r)
			case requestStop:
				report(serviceStopPending)
				cancel()
			}
		}
	}
}
