package standin

// The kubernetes executor, as far as capacity sees it: for every job the
// real gitlab-runner creates a pod in [runners.kubernetes] namespace, with
// the section's node_selector, node_tolerations, pod labels, annotations and
// requests, waits up to poll_timeout for it to run, runs the job in it and
// deletes it. The stand-in does the same with a pod whose containers do
// nothing, so that Karpenter sees the pod a real job would make: capacity
// comes up from zero for a queued job and goes back when it ends, and the
// manager's own RBAC (create, watch and delete pods in the jobs namespace) is
// exercised by the API server rather than assumed.
//
// A job fails, as on a real runner, when its pod cannot be created, does not
// run within poll_timeout, or disappears or fails while the job runs. An API
// request that the API server refused for load, failed while busy, or that a
// broken connection cut is first sent again, as gitlab-runner does
// (retry_limit): a moment of a busy API server is not a lost job.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/runnerfleet/runnerfleet/runnerset/naming"
)

// Kubernetes is the part of [runners.kubernetes] the stand-in reads.
type Kubernetes struct {
	Namespace      string `toml:"namespace"`
	Image          string `toml:"image"`
	ServiceAccount string `toml:"service_account"`
	// AutomountServiceAccountToken is the job pod's own
	// automountServiceAccountToken, set only when config.toml sets it, as
	// gitlab-runner's executor does: unset, the ServiceAccount decides.
	AutomountServiceAccountToken *bool             `toml:"automount_service_account_token"`
	CPURequest                   string            `toml:"cpu_request"`
	MemoryRequest                string            `toml:"memory_request"`
	NodeSelector                 map[string]string `toml:"node_selector"`
	NodeTolerations              map[string]string `toml:"node_tolerations"`
	PodLabels                    map[string]string `toml:"pod_labels"`
	PodAnnotations               map[string]string `toml:"pod_annotations"`
	// PollTimeout is how long a job waits for its pod to run, in seconds
	// (gitlab-runner's default: 180).
	PollTimeout int `toml:"poll_timeout"`
}

// jobIDLabel is the key of the job's ID on a job pod: gitlab-runner's
// executor annotates the pod with it; the stand-in also labels the pod with
// it, to find the pod of a job by a selector. projectIDKey is the key of
// the job's project ID, which the executor puts on the pod both as a label
// and as an annotation.
const (
	jobIDLabel   = naming.LabelGitLabJobID
	projectIDKey = naming.LabelGitLabProjectID
)

// defaultPollTimeout is gitlab-runner's poll_timeout default.
const defaultPollTimeout = 180 * time.Second

// Kube is a client of the Kubernetes API for job pods.
type Kube struct {
	// Server is the API server's URL.
	Server string
	// Token is the bearer token; empty when HTTP authenticates otherwise.
	Token string
	// HTTP carries the requests (its TLS trusts the API server).
	HTTP *http.Client
}

// Paths of a pod's in-cluster credentials, as the kubelet mounts them.
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// InCluster is the client a pod has: the kubernetes Service from
// KUBERNETES_SERVICE_HOST and _PORT, and its ServiceAccount's token and CA.
func InCluster() (*Kube, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a pod")
	}
	token, err := os.ReadFile(serviceAccountDir + "/token")
	if err != nil {
		return nil, fmt.Errorf("reading the ServiceAccount token (is automountServiceAccountToken off?): %w", err)
	}
	ca, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("the ServiceAccount's ca.crt holds no certificate")
	}
	return &Kube{
		Server: "https://" + net.JoinHostPort(host, port),
		Token:  strings.TrimSpace(string(token)),
		HTTP:   &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}},
	}, nil
}

// apiTries and the backoff between tries are gitlab-runner's defaults for
// the kubernetes executor's API calls (retry_limit 5, from 500 ms up to
// 2 s): a request the API server refused for load, failed while busy, or
// that a broken connection cut, is asked again before the job fails for it.
const (
	apiTries      = 5
	apiBackoff    = 500 * time.Millisecond
	apiBackoffMax = 2 * time.Second
)

// do sends one API request, again while it fails in a way that may pass
// (transient) and ctx lasts, up to apiTries times.
func (k *Kube) do(ctx context.Context, method, path string, in, out any) error {
	backoff := apiBackoff
	for try := 1; ; try++ {
		err := k.once(ctx, method, path, in, out)
		if err == nil || try == apiTries || ctx.Err() != nil || !transient(method, err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, apiBackoffMax)
	}
}

// transient reports whether a request that failed with err may pass when
// sent again. A 429 (the API server's priority and fairness refused it)
// did nothing, whatever the method. A 5xx or a connection that broke may
// have done something: only reads and deletes, which are the same when
// repeated, are sent again, never a create (a second job pod).
func transient(method string, err error) bool {
	var ke *kubeError
	if errors.As(err, &ke) {
		switch ke.Code {
		case http.StatusTooManyRequests:
			return true
		case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return method != http.MethodPost
		}
		return false
	}
	var ue *url.Error
	return errors.As(err, &ue) && method != http.MethodPost
}

func (k *Kube) once(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(k.Server, "/")+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if k.Token != "" {
		req.Header.Set("Authorization", "Bearer "+k.Token)
	}
	resp, err := k.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		st := struct {
			Message string `json:"message"`
		}{}
		_ = json.Unmarshal(b, &st)
		return &kubeError{Code: resp.StatusCode, Message: st.Message}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

type kubeError struct {
	Code    int
	Message string
}

func (e *kubeError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// isAPIError reports whether err is the API server's answer: a request
// refused so is known not to have been carried out.
func isAPIError(err error) bool {
	var ke *kubeError
	return errors.As(err, &ke)
}

func isNotFound(err error) bool {
	var ke *kubeError
	return errors.As(err, &ke) && ke.Code == http.StatusNotFound
}

// JobPod is the pod the stand-in creates for job id of project of runner
// r: what the kubernetes executor would ask of the scheduler, with
// containers that only wait.
func JobPod(r Runner, id, project int64, image string) map[string]any {
	k := r.Kubernetes
	labels := map[string]string{}
	for key, v := range k.PodLabels {
		labels[key] = v
	}
	// The executor's own keys, which pod_labels cannot overwrite: the
	// project's ID as a label (and the job's, the stand-in's own).
	labels[jobIDLabel] = strconv.FormatInt(id, 10)
	labels[projectIDKey] = strconv.FormatInt(project, 10)
	// Its annotations: the job's and the project's IDs, then
	// pod_annotations, which may overwrite them, as the executor's
	// buildPodAnnotations has them.
	annotations := map[string]string{
		jobIDLabel:   strconv.FormatInt(id, 10),
		projectIDKey: strconv.FormatInt(project, 10),
	}
	for key, v := range k.PodAnnotations {
		annotations[key] = v
	}
	requests := map[string]string{}
	if k.CPURequest != "" {
		requests["cpu"] = k.CPURequest
	}
	if k.MemoryRequest != "" {
		requests["memory"] = k.MemoryRequest
	}
	spec := map[string]any{
		"restartPolicy":                 "Never",
		"terminationGracePeriodSeconds": 0,
		"containers": []any{map[string]any{
			"name": "build", "image": image,
			"command":   []string{"sleep", "infinity"},
			"resources": map[string]any{"requests": requests},
		}},
	}
	if k.ServiceAccount != "" {
		spec["serviceAccountName"] = k.ServiceAccount
	}
	if k.AutomountServiceAccountToken != nil {
		spec["automountServiceAccountToken"] = *k.AutomountServiceAccountToken
	}
	if len(k.NodeSelector) > 0 {
		spec["nodeSelector"] = k.NodeSelector
	}
	if tol := Tolerations(k.NodeTolerations); len(tol) > 0 {
		spec["tolerations"] = tol
	}
	meta := map[string]any{
		"generateName": fmt.Sprintf("runner-%s-job-%d-", dnsLabel(r.Name), id),
		"namespace":    k.Namespace,
		"labels":       labels,
		"annotations":  annotations,
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
}

// Tolerations turns gitlab-runner's node_tolerations ("key=value" or "key"
// → effect, the effect empty for any) into pod tolerations, in key order.
func Tolerations(m map[string]string) []map[string]string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]map[string]string, 0, len(keys))
	for _, kv := range keys {
		t := map[string]string{}
		if key, val, ok := strings.Cut(kv, "="); ok {
			t["key"], t["operator"], t["value"] = key, "Equal", val
		} else {
			t["key"], t["operator"] = kv, "Exists"
		}
		if e := m[kv]; e != "" {
			t["effect"] = e
		}
		out = append(out, t)
	}
	return out
}

func dnsLabel(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 30 {
		out = strings.Trim(out[:30], "-")
	}
	if out == "" {
		out = "runner"
	}
	return out
}

type podStatus struct {
	Metadata struct {
		Name              string  `json:"name"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

func podPath(ns, name string) string {
	return "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name)
}

// startPod creates the job's pod and waits until it runs; it returns the
// pod's name (to delete, also on error when it was created).
func (m *manager) startPod(ctx context.Context, r Runner, id, project int64, trace func(string)) (string, error) {
	k := r.Kubernetes
	image := k.Image
	if image == "" {
		image = "alpine"
	}
	created := &podStatus{}
	// Not canceled by an abort: a create that reaches the API server
	// returns the pod's name, so that it is deleted.
	if err := m.kube.do(context.WithoutCancel(ctx), http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(k.Namespace)+"/pods", JobPod(r, id, project, image), created); err != nil {
		return "", fmt.Errorf("creating the job's pod in namespace %s: %w", k.Namespace, err)
	}
	name := created.Metadata.Name
	trace(fmt.Sprintf("Waiting for pod %s/%s to be running, status is Pending\n", k.Namespace, name))
	timeout := defaultPollTimeout
	if k.PollTimeout > 0 {
		timeout = time.Duration(k.PollTimeout) * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		p := &podStatus{}
		if err := m.kube.do(ctx, http.MethodGet, podPath(k.Namespace, name), nil, p); err != nil {
			return name, fmt.Errorf("reading pod %s/%s: %w", k.Namespace, name, err)
		}
		switch p.Status.Phase {
		case "Running":
			trace(fmt.Sprintf("Running on %s via %s...\n", name, p.Spec.NodeName))
			return name, nil
		case "Failed", "Succeeded":
			return name, fmt.Errorf("pod %s/%s is %s before the job started", k.Namespace, name, p.Status.Phase)
		}
		if time.Now().After(deadline) {
			return name, fmt.Errorf("timed out waiting for pod %s/%s to start (poll_timeout %s)", k.Namespace, name, timeout)
		}
		select {
		case <-ctx.Done():
			return name, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// podGone reports why the job's pod no longer runs, "" while it does.
func (m *manager) podGone(ctx context.Context, ns, name string) string {
	p := &podStatus{}
	err := m.kube.do(ctx, http.MethodGet, podPath(ns, name), nil, p)
	switch {
	case isNotFound(err):
		return "the job's pod was deleted"
	case err != nil:
		return "" // the API is briefly unreachable; the pod may well run
	case p.Metadata.DeletionTimestamp != nil:
		return "the job's pod is being deleted (evicted?)"
	case p.Status.Phase != "Running":
		return "the job's pod is " + p.Status.Phase
	}
	return ""
}

// deleteRetries bounds how long a job pod's deletion is retried while the
// API server refuses it or cannot be reached; what is still left then is
// the controller's to delete (spec.managers.orphanedJobGracePeriod).
const deleteRetries = 2 * time.Minute

// deletePod deletes the job's pod, as the executor's cleanup does, and
// returns once the API server took the deletion (or the pod is gone): a
// refusal or an unreachable API server is retried with backoff for up to
// deleteRetries, so that a manager does not exit leaving its pod behind.
func (m *manager) deletePod(ns, name string) bool {
	deadline := time.Now().Add(deleteRetries)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := m.kube.do(ctx, http.MethodDelete, podPath(ns, name), map[string]any{"gracePeriodSeconds": 0}, nil)
		cancel()
		if err == nil || isNotFound(err) {
			return true
		}
		if time.Now().After(deadline) {
			m.log("deleting job pod %s/%s: %v; giving up after %s: the pod is left behind", ns, name, err, deleteRetries)
			return false
		}
		m.log("deleting job pod %s/%s (attempt %d): %v; retrying", ns, name, attempt, err)
		time.Sleep(min(time.Duration(attempt)*200*time.Millisecond, 5*time.Second))
	}
}

// deletePodsOfJob deletes the pods labelled with job id, for a create
// whose outcome is unknown.
func (m *manager) deletePodsOfJob(ns string, id int64) {
	list := struct {
		Items []podStatus `json:"items"`
	}{}
	q := url.Values{"labelSelector": {jobIDLabel + "=" + strconv.FormatInt(id, 10)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := m.kube.do(ctx, http.MethodGet, "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods?"+q.Encode(), nil, &list)
	cancel()
	if err != nil {
		m.log("job %d: looking for its pod: %v", id, err)
		return
	}
	for _, p := range list.Items {
		m.deletePod(ns, p.Metadata.Name)
	}
}
