package drainagent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/gcp"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcetest"
)

// fakeDocker is the Docker Engine API's GET /containers/json on a unix
// socket, as the engine answers it: running containers only, filtered by
// the label and status filters it is given.
type fakeDocker struct {
	mu         sync.Mutex
	containers []map[string]any
}

func (d *fakeDocker) serve(t *testing.T) string {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/containers/json" {
			http.NotFound(w, r)
			return
		}
		var f map[string][]string
		if err := json.Unmarshal([]byte(r.URL.Query().Get("filters")), &f); err != nil {
			http.Error(w, `{"message":"invalid filter"}`, http.StatusBadRequest)
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		out := []map[string]any{}
		for _, c := range d.containers {
			if c["State"] != "running" {
				continue
			}
			labels := c["Labels"].(map[string]string)
			ok := true
			for _, l := range f["label"] {
				k, v, hasV := strings.Cut(l, "=")
				if lv, has := labels[k]; !has || (hasV && lv != v) {
					ok = false
				}
			}
			if ok {
				out = append(out, c)
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "unix://" + sock
}

func (d *fakeDocker) set(cs ...map[string]any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.containers = cs
}

func container(state string, labels map[string]string) map[string]any {
	return map[string]any{"Id": "c", "State": state, "Labels": labels}
}

// The job reporter counts the jobs with a running container (a job's build,
// helper and service containers are one job; other containers are none)
// and publishes the count where fleet gc reads it, through the GCE fakes.
func TestJobReporterPublishesTheJobsDockerRuns(t *testing.T) {
	srv := gcetest.New()
	t.Cleanup(srv.Close)
	const zone, name = "europe-west1-b", "runner-abcdef123-production-linux-0-1700000000-deadbeef"
	srv.AddInstance(gcetest.Instance{Name: name, Zone: zone, Metadata: map[string]string{"enable-guest-attributes": "TRUE"}})
	compute, err := gcp.New(context.Background(), srv.Project(), nil, srv.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { compute.Close() })
	docker := &fakeDocker{}
	docker.set(
		container("running", map[string]string{JobLabel: "101", "com.gitlab.gitlab-runner.type": "build"}),
		container("running", map[string]string{JobLabel: "101", "com.gitlab.gitlab-runner.type": "service"}),
		container("running", map[string]string{JobLabel: "102", "com.gitlab.gitlab-runner.type": "build"}),
		container("exited", map[string]string{JobLabel: "103"}),
		container("running", map[string]string{"app": "node-exporter"}),
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &JobReporter{Self: &gcp.Self{BaseURL: srv.MetadataServerFor(zone, name).BaseURL()}, Jobs: &DockerJobCounter{Host: docker.serve(t)},
		Interval: 50 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go r.Run(ctx)
	wait := func(want int) providers.JobReport {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			rep, err := compute.JobReport(ctx, zone, name)
			if err == nil && rep.Found && rep.Jobs == want && time.Since(rep.UpdatedAt) < time.Minute {
				return rep
			}
			if time.Now().After(deadline) {
				t.Fatalf("job report %+v, %v; want %d jobs", rep, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait(2)
	docker.set(container("running", map[string]string{"app": "node-exporter"}))
	wait(0)
}
