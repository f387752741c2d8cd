package vmfleet_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/standin"
	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/provisioning/vmfleet"
	"github.com/runnerfleet/runnerfleet/runnerset/gitlab"
)

// vmRunner runs the stand-in runner, as a new manager VM would, with
// token, against srv; its metrics are at the returned URL.
func vmRunner(t *testing.T, srv *gitlabserver.Server, token, systemID string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	cfg := "concurrent = 1\ncheck_interval = 1\nlisten_address = \":9252\"\n\n[[runners]]\n  name = \"shared\"\n  url = \"" + srv.URL() +
		"\"\n  token = \"" + token + "\"\n  executor = \"docker+machine\"\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := standin.ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() {
		standin.Run(context.Background(), standin.Options{Config: c, SystemID: systemID, Signals: sigs, Listener: ln})
		close(done)
	}()
	t.Cleanup(func() { sigs <- syscall.SIGTERM; <-done })
	return "http://" + ln.Addr().String() + "/metrics"
}

// The health --gitlab-* gives fleet rotate: the runner's metrics and
// GitLab's own record of its manager, read with the SDK client from the
// loopback GitLab.
func TestGitLabHealthNeedsGitLabsRecordOfTheVMsRunner(t *testing.T) {
	srv := gitlabserver.New()
	t.Cleanup(srv.Close)
	const pat = "glpat-rotate-reader"
	srv.AddUser(pat, gitlabserver.User{Admin: true, Scopes: []string{gitlabserver.ScopeReadAPI}})
	shared := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"shared"}})
	other := srv.AddRunner(gitlabserver.Runner{Type: gitlabserver.InstanceType, Tags: []string{"other"}})

	health := func(metrics string) vmfleet.GitLabHealth {
		return vmfleet.GitLabHealth{
			Metrics:  vmfleet.RunnerHealth{URL: func(providers.Instance) string { return metrics }},
			RunnerID: shared.ID,
			Managers: func(ctx context.Context) ([]gitlab.RunnerManager, error) {
				return gitlab.Managers(ctx, srv.URL(), pat, shared.ID, gitlab.Options{})
			},
		}
	}
	eventually := func(h vmfleet.GitLabHealth, inst providers.Instance) error {
		var err error
		for range 100 {
			if err = h.Check(context.Background(), inst); err == nil {
				return nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		return err
	}

	eventuallyMetrics := func(h vmfleet.RunnerHealth, inst providers.Instance) error {
		var err error
		for range 100 {
			if err = h.Check(context.Background(), inst); err == nil {
				return nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		return err
	}

	// A VM whose runner authenticates as the shared runner: healthy once
	// GitLab has heard from it.
	created := time.Now().Add(-time.Second)
	good := vmRunner(t, srv, shared.Token, "s_vm-good")
	if err := eventually(health(good), providers.Instance{Name: "vm-good", CreatedAt: created}); err != nil {
		t.Fatalf("a VM whose runner GitLab records as a manager of runner %d: %v", shared.ID, err)
	}

	// A VM whose image carries another runner's token: its metrics look
	// healthy (GitLab answers its job requests), GitLab has no manager of it
	// under the shared runner. The negative control: metrics alone pass.
	wrong := vmRunner(t, srv, other.Token, "s_vm-wrong")
	inst := providers.Instance{Name: "vm-wrong", CreatedAt: created}
	if err := eventuallyMetrics(health(wrong).Metrics, inst); err != nil {
		t.Fatalf("negative control: the wrong-token VM's metrics should pass alone: %v", err)
	}
	err := health(wrong).Check(context.Background(), inst)
	if err == nil || !strings.Contains(err.Error(), "GitLab has no manager s_vm-wrong") {
		t.Fatalf("a VM authenticating as another runner: %v, want GitLab's missing record named", err)
	}

	// A manager GitLab heard from only before the VM existed (a reused
	// system_id) does not count.
	later := providers.Instance{Name: "vm-good", CreatedAt: time.Now().Add(time.Hour)}
	if err := health(good).Check(context.Background(), later); err == nil || !strings.Contains(err.Error(), "not contacted GitLab since the VM was created") {
		t.Fatalf("contact before the VM was created: %v", err)
	}

	// A token that may not read the runner: the check fails, it does not pass.
	h := health(good)
	h.Managers = func(ctx context.Context) ([]gitlab.RunnerManager, error) {
		return gitlab.Managers(ctx, srv.URL(), "glpat-unknown", shared.ID, gitlab.Options{Retries: -1})
	}
	if err := h.Check(context.Background(), providers.Instance{Name: "vm-good", CreatedAt: created}); err == nil || !strings.Contains(err.Error(), "asking GitLab") {
		t.Fatalf("an unusable GitLab token: %v", err)
	}
}
