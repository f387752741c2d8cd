//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

// platformRepo is a platform repository that includes the deploy pipeline
// template: its stack config of the local stack, and a job per step.
const platformRepoCI = `include:
  - local: ci/runnerfleet.gitlab-ci.yml

preview:local:
  extends: .runnerfleet:preview
  variables:
    RUNNERFLEET_STACK: local

up:local:
  extends: .runnerfleet:up
  stage: staging
  variables:
    RUNNERFLEET_STACK: local
  environment:
    name: local

# The same stack as production, manual: it must not run by itself.
up:local-production:
  extends: .runnerfleet:up
  stage: production
  variables:
    RUNNERFLEET_STACK: local
    RUNNERFLEET_DEPLOY: manual
  environment:
    name: production
`

// pipelineRepo drives gitlab-ci-local in a git repository with an origin.
type pipelineRepo struct {
	t       *testing.T
	dir     string
	gcl     string
	vars    []string // --variable NAME=value of every pipeline
	webhook *webhook
}

func (r *pipelineRepo) git(args ...string) string {
	r.t.Helper()
	return run(r.t, r.dir, time.Minute, "git", append([]string{"-c", "user.email=ci@example.com", "-c", "user.name=ci"}, args...)...)
}

// pipeline runs gitlab-ci-local's pipeline (or the jobs named) as GitLab
// would for source on branch; it returns the output and whether it passed.
func (r *pipelineRepo) pipeline(source, branch string, extra []string, jobs ...string) (string, bool, time.Duration) {
	r.t.Helper()
	args := []string{"--no-color", "--ignore-predefined-vars", "CI_PIPELINE_SOURCE,CI_COMMIT_BRANCH,CI_DEFAULT_BRANCH,CI_MERGE_REQUEST_IID,CI_MERGE_REQUEST_SOURCE_BRANCH_NAME,CI_MERGE_REQUEST_TARGET_BRANCH_NAME"}
	vars := append([]string{"CI_PIPELINE_SOURCE=" + source, "CI_DEFAULT_BRANCH=main"}, r.vars...)
	if source == "merge_request_event" {
		vars = append(vars, "CI_MERGE_REQUEST_IID=1", "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME="+branch, "CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main")
	} else {
		vars = append(vars, "CI_COMMIT_BRANCH="+branch)
	}
	for _, v := range append(vars, extra...) {
		args = append(args, "--variable", v)
	}
	args = append(args, jobs...)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.gcl, args...)
	cmd.Dir = r.dir
	cmd.Stdin = nil
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		r.t.Logf("gitlab-ci-local| %s", l)
	}
	return string(out), err == nil, took
}

// webhook records the notifications the pipeline posts.
type webhook struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []string
}

func newWebhook(t *testing.T) *webhook {
	w := &webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		w.mu.Lock()
		w.bodies = append(w.bodies, string(b))
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhook) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.bodies
	w.bodies = nil
	return out
}

func copyFile(t *testing.T, from, to string, edit func(string) string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, []byte(edit(string(b))), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The deploy pipeline template, run by gitlab-ci-local (GitLab's rules,
// stages, variables and artifacts; jobs in a shell) against the local
// stack: a default-branch pipeline deploys the stack; a merge request
// that changes it runs fleet check and fleet preview, whose summary shows
// the change, and applies nothing; the default-branch pipeline after the
// merge applies it, the RunnerSet Ready on its new config, the jobs queued
// then all run, and the success notified. Bad input fails the job early
// with the stack's own error: a variable naming no stack, a stack whose
// checks fail (then nothing after the check runs).
func TestPipelineTemplateDeploysTheLocalStack(t *testing.T) {
	onRealNode(t)
	root := repoRoot(t)
	// fleet finds the checkout (hack/tools.sh, the stand-in runner's
	// image) above its own binary: build it inside the checkout, since the
	// jobs run in the platform repository.
	bin := filepath.Join(root, ".local", "e2e-pipeline-bin")
	run(t, root, 10*time.Minute, "go", "build", "-o", bin+string(os.PathSeparator), "./cmd/fleet", "./cmd/runnerset-controller")
	fleetBin := filepath.Join(bin, "fleet")
	gcl := strings.TrimSpace(run(t, root, 10*time.Minute, filepath.Join(root, "hack", "tools.sh"), "gitlab-ci-local"))
	state := stateDir(t)
	down := false
	t.Cleanup(func() {
		if t.Failed() {
			// The evidence outlives the temporary state: every log of the
			// stack (the controller's, the node's pods').
			keep := filepath.Join(os.TempDir(), "runnerfleet-pipeline-e2e-"+time.Now().UTC().Format("20060102T150405"))
			out, err := exec.Command("sh", "-c", `mkdir -p "$2" && cd "$1" && find . -name '*.log' -size -20M -exec cp --parents {} "$2" \;`, "sh", state, keep).CombinedOutput()
			t.Logf("the stack's logs are kept in %s (%v %s)", keep, err, out)
		}
		if !down {
			out, err := exec.Command(fleetBin, "down", "--stack", "local", "--state-dir", state).CombinedOutput()
			t.Logf("cleanup: fleet down: %v\n%s", err, out)
		}
	})

	// The platform repository, its origin holding main.
	base := t.TempDir()
	origin := filepath.Join(base, "origin.git")
	run(t, base, time.Minute, "git", "init", "-q", "--bare", "-b", "main", origin)
	repo := &pipelineRepo{t: t, dir: filepath.Join(base, "platform"), gcl: gcl, webhook: newWebhook(t)}
	run(t, base, time.Minute, "git", "clone", "-q", origin, repo.dir)
	repo.git("checkout", "-q", "-b", "main")
	copyFile(t, filepath.Join(root, "ci", "runnerfleet.gitlab-ci.yml"), filepath.Join(repo.dir, "ci", "runnerfleet.gitlab-ci.yml"), func(s string) string { return s })
	copyFile(t, filepath.Join(root, "stacks", "Pulumi.local.yaml"), filepath.Join(repo.dir, "stacks", "Pulumi.local.yaml"), func(s string) string { return s })
	if err := os.WriteFile(filepath.Join(repo.dir, ".gitlab-ci.yml"), []byte(platformRepoCI), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo.dir, ".gitignore"), []byte(".gitlab-ci-local/\nrunnerfleet-preview.md\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	repo.git("add", "-A")
	repo.git("commit", "-q", "-m", "the local stack")
	repo.git("push", "-q", "origin", "main")
	repo.git("remote", "set-head", "origin", "main")
	repo.vars = []string{
		"RUNNERFLEET_FLEET=" + fleetBin,
		"RUNNERFLEET_FLEET_FLAGS=--state-dir " + state,
		"RUNNERFLEET_WEBHOOK=" + repo.webhook.srv.URL + "/hooks/ci",
	}

	// 1. The default branch deploys the stack.
	out, ok, took := repo.pipeline("push", "main", []string{"RUNNERFLEET_UP_FLAGS=--timeout 6m"})
	if !ok {
		t.Fatalf("the first default-branch pipeline failed:\n%s", out)
	}
	t.Logf("default-branch pipeline (first deploy, control plane started) took %s", took.Round(time.Second))
	for _, job := range []string{"runnerfleet:check", "up:local", "runnerfleet:notify-success"} {
		if !regexp.MustCompile(`(?m)^\s*PASS\s+` + regexp.QuoteMeta(job) + `\s*$`).MatchString(out) {
			t.Errorf("job %s did not pass in the default-branch pipeline", job)
		}
	}
	if strings.Contains(out, "up:local-production ") && regexp.MustCompile(`(?m)^\s*PASS\s+up:local-production`).MatchString(out) {
		t.Errorf("the manual production job ran by itself:\n%s", out)
	}
	if got := repo.webhook.take(); len(got) != 1 || !strings.Contains(got[0], `"text":"runnerfleet deploy of`) || !strings.Contains(got[0], "succeeded") {
		t.Errorf("notifications after a successful deploy: %q, want one Slack message saying it succeeded", got)
	}
	c := clientFor(t, filepath.Join(state, "kubeconfig"))
	ctx := context.Background()
	rs := &v1alpha1.RunnerSet{}
	if err := c.Get(ctx, example, rs); err != nil {
		t.Fatal(err)
	}
	if !rs.IsReady() {
		t.Fatalf("RunnerSet %s is not Ready after the pipeline: %+v", example, rs.Status.Conditions)
	}
	before, oldHash := rs.Spec.Managers.ConcurrentOrDefault(), rs.Status.ConfigHash

	// 2. Bad input in a merge request: a stack whose checks fail fails
	// fleet check with the stack's own error, and nothing after it runs.
	repo.git("checkout", "-q", "-b", "broken")
	copyFile(t, filepath.Join(repo.dir, "stacks", "Pulumi.local.yaml"), filepath.Join(repo.dir, "stacks", "Pulumi.local.yaml"), func(s string) string {
		return strings.Replace(s, "replicas: 1", "replicas: -3", 1)
	})
	repo.git("commit", "-q", "-am", "a broken stack")
	out, ok, _ = repo.pipeline("merge_request_event", "broken", nil)
	if ok || !strings.Contains(out, "FAIL local (stacks/Pulumi.local.yaml)") || !strings.Contains(out, "runnerfleet:fleet.teams[0].managers.replicas") {
		t.Errorf("a merge request with a broken stack: passed=%v, want runnerfleet:check to fail naming managers.replicas:\n%s", ok, out)
	}
	if regexp.MustCompile(`(?m)^\s*PASS\s+preview:local`).MatchString(out) || strings.Contains(out, "pulumi preview --stack") {
		t.Errorf("fleet preview ran after fleet check failed:\n%s", out)
	}
	// A variable that names no stack fails the job at once, naming the
	// stacks there are.
	out, ok, _ = repo.pipeline("merge_request_event", "broken", []string{"RUNNERFLEET_STACK=nope"}, "preview:local")
	if ok || !strings.Contains(out, `no such stack config for stack "nope": the stacks in stacks are local`) {
		t.Errorf("RUNNERFLEET_STACK=nope: passed=%v, want the job to fail naming the stacks:\n%s", ok, out)
	}
	repo.git("checkout", "-q", "main")

	// 3. A merge request that changes the stack: checked and previewed,
	// nothing applied.
	repo.git("checkout", "-q", "-b", "more-concurrent")
	after := before + 4
	copyFile(t, filepath.Join(repo.dir, "stacks", "Pulumi.local.yaml"), filepath.Join(repo.dir, "stacks", "Pulumi.local.yaml"), func(s string) string {
		return strings.Replace(s, "concurrent: 4", "concurrent: "+strconv.Itoa(int(after)), 1)
	})
	repo.git("commit", "-q", "-am", "more concurrent jobs for team-a")
	out, ok, took = repo.pipeline("merge_request_event", "more-concurrent", nil)
	if !ok {
		t.Fatalf("the merge-request pipeline failed:\n%s", out)
	}
	t.Logf("merge-request pipeline (check, preview) took %s", took.Round(time.Second))
	for _, job := range []string{"runnerfleet:check", "preview:local"} {
		if !regexp.MustCompile(`(?m)^\s*PASS\s+` + regexp.QuoteMeta(job) + `\s*$`).MatchString(out) {
			t.Errorf("job %s did not pass in the merge-request pipeline", job)
		}
	}
	for _, job := range []string{"up:local", "up:local-production", "runnerfleet:notify-success", "runnerfleet:notify-failure"} {
		if regexp.MustCompile(`(?m)^\s*(PASS|FAIL)\s+` + regexp.QuoteMeta(job) + `\s*$`).MatchString(out) {
			t.Errorf("job %s ran in a merge-request pipeline", job)
		}
	}
	summary := previewSummaryOf(t, repo.dir)
	for _, want := range []string{"### pulumi preview of stack `local`", "| update | 1 |", "RunnerSet"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the preview's summary has no %q:\n%s", want, summary)
		}
	}
	if err := c.Get(ctx, example, rs); err != nil {
		t.Fatal(err)
	}
	if rs.Spec.Managers.ConcurrentOrDefault() != before || rs.Status.ConfigHash != oldHash {
		t.Fatalf("the merge-request pipeline applied something: concurrent %d (was %d), config %s (was %s)", rs.Spec.Managers.ConcurrentOrDefault(), before, rs.Status.ConfigHash, oldHash)
	}
	if got := repo.webhook.take(); len(got) != 0 {
		t.Errorf("a merge-request pipeline notified: %q", got)
	}

	// 4. Merged: the default branch applies it; jobs queued after the
	// rollout all run on the new managers.
	repo.git("checkout", "-q", "main")
	repo.git("merge", "-q", "--ff-only", "more-concurrent")
	repo.git("push", "-q", "origin", "main")
	out, ok, took = repo.pipeline("push", "main", []string{"RUNNERFLEET_UP_FLAGS=--timeout 6m --demo-jobs 3 --demo-duration 5s"})
	if !ok {
		t.Fatalf("the default-branch pipeline after the merge failed:\n%s", out)
	}
	t.Logf("default-branch pipeline (apply on a running stack) took %s", took.Round(time.Second))
	if err := c.Get(ctx, example, rs); err != nil {
		t.Fatal(err)
	}
	if !rs.IsReady() || rs.Spec.Managers.ConcurrentOrDefault() != after || rs.Status.ConfigHash == oldHash {
		t.Fatalf("after the default-branch pipeline: Ready=%v concurrent %d (want %d), config %s (was %s)", rs.IsReady(), rs.Spec.Managers.ConcurrentOrDefault(), after, rs.Status.ConfigHash, oldHash)
	}
	if got := repo.webhook.take(); len(got) != 1 || !strings.Contains(got[0], "succeeded") {
		t.Errorf("notifications after the merge's deploy: %q, want one saying it succeeded", got)
	}
	// No job lost: every job the loopback GitLab handed out ends in
	// success (fleet status lists them).
	jobRow := regexp.MustCompile(`(?m)^(\d+)\s+team-a\s+\S+\s+(\w+)\s`)
	waitFor(t, 3*time.Minute, "the demo jobs queued after the rollout succeeded", func() error {
		st := run(t, repo.dir, time.Minute, fleetBin, "status", "--stack", "local", "--state-dir", state)
		rows := jobRow.FindAllStringSubmatch(st, -1)
		if len(rows) < 3 {
			return fmt.Errorf("%d jobs listed, want the 3 demo jobs:\n%s", len(rows), st)
		}
		for _, r := range rows {
			if r[2] != "success" {
				return fmt.Errorf("job %s is %s:\n%s", r[1], r[2], st)
			}
		}
		return nil
	})

	run(t, root, 5*time.Minute, fleetBin, "down", "--stack", "local", "--state-dir", state)
	down = true
}

// previewSummaryOf is the preview job's summary, wherever gitlab-ci-local
// left it (the job's directory or its artifacts).
func previewSummaryOf(t *testing.T, dir string) string {
	t.Helper()
	var found string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "runnerfleet-preview.md" && found == "" {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no runnerfleet-preview.md under %s: the preview job's summary was not kept", dir)
	}
	b, err := os.ReadFile(found)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the preview's summary (%s):\n%s", found, b)
	return string(b)
}
