package main

// The local stack's loopback GitLab: gitlabserver's server as a process beside
// the control plane, listening where the real node's pods reach this machine
// (localcluster.HostIP), so that the stand-in managers poll it for jobs. A
// control API on 127.0.0.1 lets fleet register the stack's runners (their
// tokens come from the RunnerSets' Secrets), queue demo jobs and list jobs.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runnerfleet/runnerfleet/localstack/gitlabserver"
	"github.com/runnerfleet/runnerfleet/localstack/localcluster"
	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

const (
	// localGitLab names the process in the state directory.
	localGitLab = "gitlab"
	// LocalGitLabPort is where the loopback GitLab listens on
	// localcluster.HostIP; stacks/Pulumi.local.yaml's gitlabURL names it.
	localGitLabPort = 8929
)

func localGitLabURL() string {
	return fmt.Sprintf("http://%s:%d", localcluster.HostIP, localGitLabPort)
}

// serveLocalGitLab is `fleet local-gitlab`: it runs until SIGTERM.
func serveLocalGitLab(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet local-gitlab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", net.JoinHostPort(localcluster.HostIP, strconv.Itoa(localGitLabPort)), "the GitLab API's address")
	control := fs.String("control", "127.0.0.1:0", "the control API's address (127.0.0.1 only)")
	stateDir := fs.String("state-dir", "", "the local stack's state directory (marks the process as its own)")
	if err := parse(fs, args); err != nil {
		return err
	}
	_ = stateDir
	srv, err := gitlabserver.NewOn(*listen)
	if err != nil {
		return err
	}
	defer srv.Close()
	srv.SetLogf(func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		if strings.Contains(line, "/jobs/request: 204") {
			return // every manager asks every few seconds; only answers with a job are news
		}
		fmt.Fprintf(stderr, "%s %s\n", time.Now().UTC().Format(time.RFC3339), line)
	})
	l, err := net.Listen("tcp", *control)
	if err != nil {
		return err
	}
	cs := &http.Server{Handler: srv.ControlHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = cs.Serve(l) }()
	defer cs.Close()
	fmt.Fprintf(stderr, "loopback GitLab on %s, control API on %s\n", srv.URL(), l.Addr())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sigs:
	case <-ctx.Done():
	}
	return nil
}

// startGitLab runs the loopback GitLab beside the cluster unless it runs.
func (s *localStack) startGitLab(ctx context.Context, cl *localcluster.Cluster) error {
	if cl.Running(localGitLab) != 0 {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	port, err := localcluster.FreePort()
	if err != nil {
		return err
	}
	control := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := localcluster.Process{
		Name: localGitLab, Path: exe,
		Args:     []string{"local-gitlab", "--control", fmt.Sprintf("127.0.0.1:%d", port), "--state-dir=" + s.dir},
		Endpoint: localGitLabURL(),
		Ready:    func(ctx context.Context) error { return get(ctx, control+"/healthz") },
	}
	t := time.Now()
	pid, err := cl.StartProcess(ctx, p, 30*time.Second, port, localGitLabPort)
	if err != nil {
		return fmt.Errorf("starting the loopback GitLab: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "gitlab-control"), []byte(control), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(s.stderr, "Started %-23s pid %-7d %-28s %.1fs\n", localGitLab, pid, localGitLabURL(), time.Since(t).Seconds())
	return nil
}

func (s *localStack) gitlabControl() (gitlabserver.Control, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "gitlab-control"))
	if err != nil {
		return gitlabserver.Control{}, fmt.Errorf("the loopback GitLab's control address: %w", err)
	}
	return gitlabserver.Control{URL: string(bytes.TrimSpace(b))}, nil
}

// registerRunners tells the loopback GitLab the token and tags of every
// RunnerSet whose token is in a Secret, as if each had been created in
// GitLab's UI.
func (s *localStack) registerRunners(ctx context.Context, cl *localcluster.Cluster) error {
	control, err := s.gitlabControl()
	if err != nil {
		return err
	}
	list := &v1alpha1.RunnerSetList{}
	if err := cl.Client.List(ctx, list); err != nil {
		return err
	}
	for _, rs := range list.Items {
		ref := rs.Spec.GitLab.TokenSecretRef
		if ref == nil {
			continue
		}
		sec := &corev1.Secret{}
		if err := cl.Client.Get(ctx, client.ObjectKey{Namespace: rs.Namespace, Name: ref.Name}, sec); err != nil {
			return fmt.Errorf("reading the token of RunnerSet %s/%s: %w", rs.Namespace, rs.Name, err)
		}
		tok := string(sec.Data[ref.KeyOrDefault()])
		if tok == "" {
			return fmt.Errorf("Secret %s/%s has no key %s: the RunnerSet's runner token", rs.Namespace, ref.Name, ref.KeyOrDefault())
		}
		if err := control.AddNamedRunner(ctx, tok, rs.Namespace+"/"+rs.Name, rs.Spec.Tags); err != nil {
			return err
		}
	}
	return nil
}

// queueDemoJobs queues n jobs of d for each RunnerSet's tags, once for
// RunnerSets of the same tags (an overflow and its primary take the same
// jobs).
func (s *localStack) queueDemoJobs(ctx context.Context, cl *localcluster.Cluster, n int, d time.Duration) error {
	control, err := s.gitlabControl()
	if err != nil {
		return err
	}
	list := &v1alpha1.RunnerSetList{}
	if err := cl.Client.List(ctx, list); err != nil {
		return err
	}
	queued := map[string]bool{}
	for _, rs := range list.Items {
		key := strings.Join(slices.Sorted(slices.Values(rs.Spec.Tags)), ",")
		if queued[key] {
			continue
		}
		queued[key] = true
		if err := control.QueueJobs(ctx, rs.Spec.Tags, d, n); err != nil {
			return err
		}
		fmt.Fprintf(s.stderr, "Queued %d demo jobs of %s for tags %v in the loopback GitLab\n", n, d, rs.Spec.Tags)
	}
	return nil
}

// jobs lists the loopback GitLab's jobs.
func (s *localStack) jobs(ctx context.Context) ([]gitlabserver.ControlJob, error) {
	control, err := s.gitlabControl()
	if err != nil {
		return nil, err
	}
	return control.Jobs(ctx)
}
