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
// docker+machine boots a stock image and installs Docker itself.

// JobReporterContainer names the job reporter's container on a VM.
const JobReporterContainer = "runnerfleet-job-reporter"

// JobReporterArgs are fleet-agent's arguments as the job reporter of a VM
// of provider (gce or ec2).
func JobReporterArgs(provider string) []string {
	return []string{"--provider", provider, "--report-jobs"}
}

// JobReporterStartupScript is a VM's startup script (GCE startup-script
// metadata, EC2 user data) that runs the job reporter from image, the
// release's fleet-agent image (whose entrypoint is fleet-agent), as a
// container the Docker engine restarts with the VM: it waits for the
// engine (docker+machine installs it after boot), then starts the
// container unless it exists. It reaches the engine through its socket,
// so it runs as root in the container, and the metadata server on the
// host's network.
//
// The script holds no '=' and no ',': docker+machine takes it as one
// --google-metadata key=value flag, whose value must not be split.
func JobReporterStartupScript(image, provider string) string {
	run := append([]string{"docker", "run", "--detach", "--name", JobReporterContainer, "--restart", "always",
		"--network", "host", "--user", "0", "--volume", "/var/run/docker.sock:/var/run/docker.sock", image},
		JobReporterArgs(provider)...)
	return fmt.Sprintf(`#!/bin/sh
# runnerfleet: the job reporter fleet gc reads (fleet-agent --report-jobs)
until docker info >/dev/null 2>&1; do sleep 5; done
docker inspect %[1]s >/dev/null 2>&1 || %[2]s
`, JobReporterContainer, strings.Join(run, " "))
}
