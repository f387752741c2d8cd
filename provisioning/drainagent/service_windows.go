//go:build windows

package drainagent

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"
)

// NewRunnerControl is a ServiceRunner on Windows.
func NewRunnerControl(o RunnerOptions, log *slog.Logger) (RunnerControl, error) {
	name := o.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	return &ServiceRunner{Name: name, Log: log}, nil
}

// ServiceRunner controls gitlab-runner's Windows service: a service stop is
// its graceful stop (stop taking jobs, finish the running ones, exit).
type ServiceRunner struct {
	Name string
	Log  *slog.Logger // default slog.Default()

	mu       sync.Mutex
	asked    bool       // a stop was asked of a running service
	last     svc.Status // as last queried
	queryErr error      // of the last query
}

func (s *ServiceRunner) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// withService runs f on the service; a service that does not exist is
// ErrRunnerNotRunning.
func (s *ServiceRunner) withService(f func(*mgr.Service) error) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connecting to the service manager: %w", err)
	}
	defer m.Disconnect()
	srv, err := m.OpenService(s.Name)
	if err != nil {
		if errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST) {
			return fmt.Errorf("%w: service %q does not exist", ErrRunnerNotRunning, s.Name)
		}
		return fmt.Errorf("opening service %q: %w", s.Name, err)
	}
	defer srv.Close()
	return f(srv)
}

// StopGracefully stops the service, unless it is stopping already.
func (s *ServiceRunner) StopGracefully() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.withService(func(srv *mgr.Service) error {
		st, err := srv.Query()
		if err != nil {
			return fmt.Errorf("querying service %q: %w", s.Name, err)
		}
		s.last = st
		switch st.State {
		case svc.Stopped:
			if s.asked {
				return nil // stopped since it was asked: Exited says so
			}
			return fmt.Errorf("%w: service %q is stopped", ErrRunnerNotRunning, s.Name)
		case svc.StopPending:
			s.asked = true
			return nil
		}
		st, err = srv.Control(svc.Stop)
		switch {
		case errors.Is(err, windows.ERROR_SERVICE_NOT_ACTIVE):
			if s.asked {
				return nil
			}
			return fmt.Errorf("%w: service %q is not active", ErrRunnerNotRunning, s.Name)
		case errors.Is(err, windows.ERROR_SERVICE_CANNOT_ACCEPT_CTRL):
			// Starting or stopping: ask again later.
			return fmt.Errorf("service %q cannot take a stop now: %w", s.Name, err)
		case err != nil:
			return fmt.Errorf("stopping service %q: %w", s.Name, err)
		}
		s.asked = true
		s.last = st
		return nil
	})
}

// Exited reports whether the service is stopped (or gone). Before
// StopGracefully asked it to stop it reports true.
func (s *ServiceRunner) Exited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.asked {
		return true
	}
	err := s.withService(func(srv *mgr.Service) error {
		st, err := srv.Query()
		if err != nil {
			return err
		}
		s.last = st
		return nil
	})
	if errors.Is(err, ErrRunnerNotRunning) {
		return true
	}
	if err != nil {
		if s.queryErr == nil || s.queryErr.Error() != err.Error() {
			s.log().Warn("querying the runner service failed", "service", s.Name, "err", err)
		}
		s.queryErr = err
		return false
	}
	s.queryErr = nil
	return s.last.State == svc.Stopped
}

// ExitDescription reads the stopped service's exit codes.
func (s *ServiceRunner) ExitDescription() (abnormal bool, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.last
	switch {
	case st.Win32ExitCode == 0:
		return false, fmt.Sprintf("service %q stopped", s.Name)
	case windows.Errno(st.Win32ExitCode) == windows.ERROR_SERVICE_SPECIFIC_ERROR:
		return st.ServiceSpecificExitCode != 0, fmt.Sprintf("service %q stopped with service exit code %d", s.Name, st.ServiceSpecificExitCode)
	default:
		return true, fmt.Sprintf("service %q stopped with exit code %d (%v)", s.Name, st.Win32ExitCode, windows.Errno(st.Win32ExitCode))
	}
}
