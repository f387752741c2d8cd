package vmfleet

import (
	"fmt"
	"strings"
)

// The job reporter is what proves to fleet gc that an autoscaled VM runs
// no job: fleet-agent --report-jobs beside the VM's Docker engine, which
// counts the running containers labelled with a GitLab job ID and writes
// the count and its time where gc reads them (GCE guest attributes, EC2
// tags). Without it gc never deletes a running VM (no report is "busy").
// docker+machine VMs get it from their startup script, since
// docker+machine boots a stock image and installs Docker itself. The same
// script starts the fleet's node_exporter, which the fleet's Prometheus
// scrapes.

// Names of the containers a VM's startup script runs.
const (
	// JobReporterContainer names the job reporter's container on a VM.
	JobReporterContainer = "runnerfleet-job-reporter"
	// NodeExporterContainer names node_exporter's container on a VM.
	NodeExporterContainer = "runnerfleet-node-exporter"
)

// JobReporterArgs are fleet-agent's arguments as the job reporter of a VM
// of provider (gce or ec2).
func JobReporterArgs(provider string) []string {
	return []string{"--provider", provider, "--report-jobs"}
}

// Container is one container a VM's startup script starts: docker run
// Options, then Image, then Args. Every one runs on the host's network and
// restarts with the VM.
type Container struct {
	Name    string
	Image   string
	Options []string
	Args    []string
}

// JobReporter is the job reporter from image, the release's fleet-agent
// image (whose entrypoint is fleet-agent), on a VM of provider. It reaches
// the engine through its socket, so it runs as root in the container, and
// the metadata server on the host's network.
func JobReporter(image, provider string) Container {
	return Container{
		Name: JobReporterContainer, Image: image,
		Options: []string{"--user", "0", "--volume", "/var/run/docker.sock:/var/run/docker.sock"},
		Args:    JobReporterArgs(provider),
	}
}

// NodeExporter is node_exporter from image with args (which read the
// host's file system at /host): the host's process and network namespaces
// and its root file system read-only, so that it reports the VM, not its
// container.
func NodeExporter(image string, args []string) Container {
	return Container{
		Name: NodeExporterContainer, Image: image,
		Options: []string{"--pid", "host", "--volume", "/:/host:ro"},
		Args:    args,
	}
}

// StartupScript is a VM's startup script (GCE startup-script metadata, EC2
// user data) that runs containers with the Docker engine, restarted with
// the VM: it waits for the engine (docker+machine installs it after boot),
// then starts each container unless it exists.
//
// The script holds no '=' and no ',': docker+machine takes it as one
// --google-metadata key=value flag, whose value must not be split. An
// option or argument that holds one is refused.
func StartupScript(containers ...Container) (string, error) {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# runnerfleet: what the VM runs beside the jobs (")
	for i, c := range containers {
		if i > 0 {
			b.WriteString(" and ")
		}
		b.WriteString(c.Name)
	}
	b.WriteString(")\nuntil docker info >/dev/null 2>&1; do sleep 5; done\n")
	for _, c := range containers {
		run := append([]string{"docker", "run", "--detach", "--name", c.Name, "--restart", "always", "--network", "host"}, c.Options...)
		run = append(append(run, c.Image), c.Args...)
		for _, w := range run {
			if w == "" || strings.ContainsAny(w, "=, \t\n'\"\\$`;&|<>()") {
				return "", fmt.Errorf("the startup script of %s cannot hold %q: docker-machine splits its metadata at '=' and ',', and the shell would read the rest", c.Name, w)
			}
		}
		fmt.Fprintf(&b, "docker inspect %s >/dev/null 2>&1 || %s\n", c.Name, strings.Join(run, " "))
	}
	return b.String(), nil
}
