//go:build windows

package main

import (
	"context"
	"os"

	"golang.org/x/sys/windows/svc"
)

// runAsService runs the agent under the service control manager when that
// started it (a service has no console: give it --log-file), and then exits.
// It returns false when the agent was started otherwise.
func runAsService(args []string) bool {
	is, err := svc.IsWindowsService()
	if err != nil || !is {
		return false
	}
	h := &serviceHandler{args: args}
	if err := svc.Run("fleet-agent", h); err != nil {
		os.Exit(1)
	}
	os.Exit(h.code)
	return true
}

// serviceHandler runs the agent as a service: a service stop or a shutdown
// stops the agent (not the drain), done stops the service.
type serviceHandler struct {
	args []string
	code int
}

func (h *serviceHandler) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	h.code = serveService(func(ctx context.Context) error { return run(ctx, h.args, os.Stderr) }, req, requestOf,
		func(c svc.ChangeRequest) { status <- c.CurrentStatus },
		func(s serviceState) { status <- statusOf(s) })
	// A non-zero code is the service's own exit code.
	return h.code != 0, uint32(h.code)
}

// requestOf classifies a request of the service control manager.
func requestOf(c svc.ChangeRequest) serviceRequest {
	switch c.Cmd {
	case svc.Interrogate:
		return requestInterrogate
	case svc.Stop, svc.Shutdown:
		return requestStop
	}
	return requestIgnored
}

// statusOf is the service status of a state.
func statusOf(s serviceState) svc.Status {
	switch s {
	case serviceRunning:
		return svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	case serviceStopPending:
		return svc.Status{State: svc.StopPending}
	}
	return svc.Status{State: svc.StartPending}
}
