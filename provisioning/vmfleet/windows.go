package vmfleet

import (
	"fmt"

	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
)

// Windows shared runner managers follow GitLab.com's conventions.
const (
	// WindowsGroup is the manager group of the Windows shared runners.
	WindowsGroup = "windows-shared-runners-manager"
	// WindowsPrefix is the short prefix of their VMs and metrics.
	WindowsPrefix = "wsrm"
	// WindowsPrometheusJob scrapes their runners and windows_exporter.
	WindowsPrometheusJob = "shared-runners-windows"
	// WindowsExporterPort is windows_exporter's default port.
	WindowsExporterPort = fleetspec.WindowsExporterPort
)

// WindowsManagerName is the name of the n-th Windows manager.
func WindowsManagerName(n int) string { return fmt.Sprintf("%s-%d", WindowsGroup, n) }
