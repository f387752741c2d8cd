// Package sharedfleet holds the pure builders of the shared fleets (the
// model, fleetspec.SharedFleet and fleetspec.ManagerGroup, lives in
// provisioning/fleetspec): their managers' config.toml, chart values and
// Kubernetes objects, each fleet's Prometheus, kube-state-metrics and gc
// CronJob, and the central Prometheus and Alertmanager, planned and checked
// as a whole by PlanFleet, PlanCentral and PlanAlertmanager.
// Managers are gitlab-runner processes whose jobs run on autoscaled GCE VMs,
// with the docker+machine executor (google driver) or the docker-autoscaler
// executor with the fleeting googlecloud plugin (a managed instance group).
// docker+machine is deprecated upstream and due for removal in runner 20.0;
// docker-autoscaler is its successor. infra/sharedfleet declares what these
// builders return, adding only what holds a secret or is known at deploy
// time (the runner tokens, the cache bucket, the releases' values).
package sharedfleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/runnerfleet/runnerfleet/providers/gcp/gcenames"
	"github.com/runnerfleet/runnerfleet/provisioning/fleetspec"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlabrunner"
	"github.com/runnerfleet/runnerfleet/runnerset/runnerconfig"
)

// Job defaults of a group.
const (
	DefaultJobImage = string(v1alpha1.DefaultJobImage)
	DefaultCacheDir = "/cache"
	// WindowsJobImage matches the Windows Server 2022 VMs.
	WindowsJobImage = "mcr.microsoft.com/windows/servercore:ltsc2022"
	WindowsCacheDir = `C:\cache`
	WindowsShell    = "pwsh"
)

// Owner is the owner manager gives its autoscaled VMs: fleet, group,
// manager, hosted in Kubernetes, and the incarnation the start script fills
// in. fleet gc reads the same labels back (vmfleet.OwnerOf).
func Owner(g fleetspec.ManagerGroup, manager string) vmfleet.Owner {
	return vmfleet.Owner{
		Fleet: g.Fleet, Group: g.Name, Manager: manager, Host: vmfleet.HostKubernetes,
		Incarnation: vmfleet.IncarnationPlaceholder,
	}
}

// Config is the config.toml of g's manager named g.ManagerName(); see
// ConfigFor.
func Config(g fleetspec.ManagerGroup) (runnerconfig.Config, error) {
	return ConfigFor(g, g.ManagerName())
}

// ConfigFor is the config.toml of the group's manager named manager. The
// token is runnerconfig.TokenPlaceholder, the incarnation
// vmfleet.IncarnationPlaceholder.
func ConfigFor(g fleetspec.ManagerGroup, manager string) (runnerconfig.Config, error) {
	if err := g.Validate(); err != nil {
		return runnerconfig.Config{}, err
	}
	owner := Owner(g, manager)
	if err := owner.Validate(); err != nil {
		return runnerconfig.Config{}, fmt.Errorf("%s: %w", g.Key("name"), err)
	}
	concurrent := g.ConcurrentOrDefault()
	jobImage, cacheDir, shell := DefaultJobImage, DefaultCacheDir, ""
	if g.Windows {
		jobImage, cacheDir, shell = WindowsJobImage, WindowsCacheDir, WindowsShell
	}
	if g.JobImage != "" {
		jobImage = g.JobImage
	}
	r := runnerconfig.Runner{
		Name:               manager,
		URL:                g.GitLabURL,
		Token:              runnerconfig.TokenPlaceholder,
		Limit:              g.MaxVMs,
		RequestConcurrency: min(concurrent, 10),
		Shell:              shell,
		Docker:             &runnerconfig.Docker{Image: jobImage, Volumes: []string{cacheDir}, ShmSize: 0},
	}
	if g.CacheBucket != "" {
		r.Cache = &runnerconfig.Cache{Type: "gcs", Path: g.Fleet, Shared: true, GCS: &runnerconfig.CacheGCS{BucketName: g.CacheBucket}}
	}
	labels := owner.Labels()
	var global *runnerconfig.MachineConfig
	switch g.Executor {
	case "", fleetspec.ExecutorDockerMachine:
		r.Executor = fleetspec.ExecutorDockerMachine
		agents := g.Agents()
		script, err := vmfleet.StartupScript(
			vmfleet.JobReporter(agents.JobReporterImage, "gce"),
			vmfleet.NodeExporter(agents.NodeExporter.Image, agents.NodeExporter.Args()),
		)
		if err != nil {
			return runnerconfig.Config{}, fmt.Errorf("%s: %w", g.Key("name"), err)
		}
		opts := []string{
			"google-project=" + g.Project,
			"google-zone=" + g.Zone,
			"google-machine-type=" + g.MachineType,
			"google-machine-image=" + g.Image,
			// No external address: the managers reach the VMs over the
			// VPC, the VMs reach out through Cloud NAT.
			"google-use-internal-ip-only=true",
			fmt.Sprintf("google-preemptible=%t", g.SpotVMs()),
			// The program declares the VMs' firewall rules (only the
			// managers' pods reach them); the driver's own rule would open
			// the Docker port to 0.0.0.0/0.
			"google-skip-firewall-create=true",
			"google-tags=" + strings.Join(append([]string{g.VMNetworkTag()}, g.NetworkTags...), ","),
			// fleet gc deletes a VM only once its job reporter said it
			// runs no job: the startup script runs the reporter, which
			// writes to guest attributes, which the VM must allow. The
			// same script runs the fleet's node_exporter, which the
			// fleet's Prometheus scrapes (PrometheusConfig) through the
			// firewall rule fleetspec.SharedFleet.VMIngress names.
			"google-metadata=" + gcenames.GuestAttributesKey + "=TRUE",
			"google-metadata=startup-script=" + script,
		}
		if g.Network != "" {
			opts = append(opts, "google-network="+g.Network)
		}
		if g.VMServiceAccount != "" {
			opts = append(opts, "google-service-account="+g.VMServiceAccount)
		}
		if g.Subnetwork != "" {
			opts = append(opts, "google-subnetwork="+g.Subnetwork)
		}
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			opts = append(opts, "google-label="+k+":"+labels[k])
		}
		m := &runnerconfig.Machine{
			IdleCount:      g.IdleCount,
			IdleTime:       int(g.IdleTime.Seconds()),
			MaxBuilds:      g.MaxBuilds,
			MachineDriver:  "google",
			MachineName:    vmfleet.MachineName(manager),
			MachineOptions: opts,
		}
		for _, p := range g.Periods {
			m.Autoscaling = append(m.Autoscaling, runnerconfig.MachineAutoscaling{
				Periods: p.Periods, Timezone: p.Timezone, IdleCount: p.IdleCount, IdleTime: int(p.IdleTime.Seconds()),
			})
		}
		r.Machine = m
		// On shutdown (a rollout, a scale-down, a pulumi destroy) the
		// manager removes its idle VMs once its jobs are done, so no VM
		// outlives the manager that knows it.
		global = &runnerconfig.MachineConfig{ShutdownDrain: &runnerconfig.MachineShutdownDrain{
			Enabled: true, Concurrency: 3, MaxRetries: 3, RetryBackoff: runnerconfig.Duration(5 * time.Second),
		}}
	case fleetspec.ExecutorDockerAutoscaler:
		r.Executor = fleetspec.ExecutorDockerAutoscaler
		a := &runnerconfig.Autoscaler{
			Plugin:              "googlecloud",
			CapacityPerInstance: 1,
			MaxUseCount:         g.MaxBuilds,
			MaxInstances:        g.MaxVMs,
			PluginConfig:        map[string]string{"name": fleetspec.InstanceGroupName(manager), "project": g.Project, "zone": g.Zone},
			ConnectorConfig:     &runnerconfig.ConnectorConfig{OS: "linux", Protocol: "ssh", Username: "runner", UseExternalAddr: false},
			Policy:              []runnerconfig.AutoscalerPolicy{{Periods: []string{"* * * * *"}, IdleCount: g.IdleCount, IdleTime: runnerconfig.Duration(g.IdleTime.Duration)}},
		}
		for _, p := range g.Periods {
			a.Policy = append(a.Policy, runnerconfig.AutoscalerPolicy{
				Periods: p.Periods, Timezone: p.Timezone, IdleCount: p.IdleCount, IdleTime: runnerconfig.Duration(p.IdleTime.Duration),
			})
		}
		if g.Windows {
			a.ConnectorConfig.OS, a.ConnectorConfig.Protocol, a.ConnectorConfig.Username = "windows", "winrm", "gitlab-runner"
		}
		r.Autoscaler = a
	}
	return runnerconfig.Config{
		Concurrent:      concurrent,
		CheckInterval:   3,
		LogFormat:       "json",
		ListenAddress:   gitlabrunner.ListenAddress,
		ShutdownTimeout: runnerconfig.ForcedShutdownTimeout,
		Machine:         global,
		Runners:         []runnerconfig.Runner{r},
	}, nil
}

// InstanceTemplateLabels are the labels of the VMs of docker-autoscaler
// manager's instance group: its Owner's but the incarnation, which a
// template cannot know (fleet gc leaves a group's VMs to the group).
func InstanceTemplateLabels(g fleetspec.ManagerGroup, manager string) map[string]string {
	o := Owner(g, manager)
	o.Incarnation = ""
	return o.Labels()
}
