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
	status <- svc.Status{State: svc.StartPending}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, h.args, os.Stderr) }()
	status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	for {
		select {
		case err := <-done:
			h.code = exitCode(ctx, err)
			status <- svc.Status{State: svc.StopPending}
			// A non-zero code is the service's own exit code.
			return h.code != 0, uint32(h.code)
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending}
				cancel()
			}
		}
	}
}
