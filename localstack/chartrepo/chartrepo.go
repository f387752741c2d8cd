// Package chartrepo is the local stack's loopback Helm chart repository:
// an HTTP server speaking Helm's repository protocol (index.yaml and the
// charts' .tgz archives), from which the real Pulumi Kubernetes provider
// fetches the shared fleets' chart as it fetches the gitlab-runner chart
// from its repository on a cloud.
//
// The chart it serves is a stand-in for the gitlab-runner chart that the
// shared fleets pin (provisioning/sharedfleet: ChartName, ChartVersion),
// generated here (StandinChart): nothing can reach the real chart's
// repository from the local stack, and the real chart's templates run the
// real gitlab-runner image's entrypoint. The stand-in reads the same
// values as the pinned chart (sharedfleet.ChartValues: every one of them,
// checked by TestStandinChartReadsEveryChartValue) and renders from them a
// Deployment of one manager that runs the stand-in runner
// (localstack/standin) the way the chart runs gitlab-runner: the
// preEntrypointScript the program wrote, then `gitlab-runner run` on the
// config.toml it put in place; the config and token Secrets mounted under
// /secrets; the program's volumes (a docker+machine manager's state
// claim, given to the image's user, ociimage.NonRoot, by an init container
// as a disk's fsGroup would be), environment, preStop hook (SIGQUIT, then wait),
// terminationGracePeriodSeconds, strategy, labels, placement and
// resources as given. What the stand-in cannot do it refuses at render
// time: the chart's own RBAC, ServiceAccount, session server and
// unregister hook (the program turns each off).
package chartrepo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/runnerfleet/runnerfleet/internal/ociimage"

	shared "github.com/runnerfleet/runnerfleet/provisioning/sharedfleet"
)

// Chart is a packaged chart.
type Chart struct {
	Name, Version string
	// Archive is the .tgz Helm installs.
	Archive []byte
}

// File is the archive's name in the repository.
func (c Chart) File() string { return c.Name + "-" + c.Version + ".tgz" }

// epoch is the archive's file time: the same chart is the same bytes.
var epoch = time.Unix(0, 0).UTC()

// StandinChart is the stand-in for the pinned gitlab-runner chart:
// shared.ChartName at shared.ChartVersion.
func StandinChart() (Chart, error) {
	meta, err := yaml.Marshal(map[string]any{
		"apiVersion":  "v2",
		"name":        shared.ChartName,
		"version":     shared.ChartVersion,
		"description": "runnerfleet's local stand-in for the gitlab-runner chart: one manager Deployment running the stand-in runner (localstack/chartrepo)",
		"type":        "application",
	})
	if err != nil {
		return Chart{}, err
	}
	files := []struct {
		name string
		body []byte
	}{
		{"Chart.yaml", meta},
		{"values.yaml", []byte(defaultValues)},
		{"templates/deployment.yaml", []byte(strings.NewReplacer("@TOKEN_KEY@", shared.SecretKeyRunnerToken, "@APP@", shared.LabelChartApp, "@OWNER@", ociimage.NonRoot).Replace(deploymentTemplate))},
		{"templates/service.yaml", []byte(strings.ReplaceAll(serviceTemplate, "@APP@", shared.LabelChartApp))},
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{Name: shared.ChartName + "/" + f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: epoch, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return Chart{}, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return Chart{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Chart{}, err
	}
	if err := gz.Close(); err != nil {
		return Chart{}, err
	}
	return Chart{Name: shared.ChartName, Version: shared.ChartVersion, Archive: buf.Bytes()}, nil
}

// Index is the repository's index.yaml for charts.
func Index(charts ...Chart) ([]byte, error) {
	entries := map[string][]any{}
	for _, c := range charts {
		sum := sha256.Sum256(c.Archive)
		entries[c.Name] = append(entries[c.Name], map[string]any{
			"apiVersion": "v2",
			"name":       c.Name,
			"version":    c.Version,
			"urls":       []string{c.File()},
			"digest":     hex.EncodeToString(sum[:]),
			"created":    epoch.Format(time.RFC3339),
		})
	}
	return yaml.Marshal(map[string]any{"apiVersion": "v1", "entries": entries, "generated": epoch.Format(time.RFC3339)})
}

// Handler serves charts as a Helm repository: GET /index.yaml and GET
// /<name>-<version>.tgz.
func Handler(charts ...Chart) (http.Handler, error) {
	index, err := Index(charts...)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, c := range charts {
		files["/"+c.File()] = c.Archive
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "a chart repository is read with GET", http.StatusMethodNotAllowed)
			return
		}
		p := "/" + strings.TrimLeft(r.URL.Path, "/")
		switch b, ok := files[p]; {
		case p == "/index.yaml":
			w.Header().Set("Content-Type", "application/x-yaml")
			_, _ = w.Write(index)
		case ok:
			w.Header().Set("Content-Type", "application/gzip")
			_, _ = w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}), nil
}

// defaultValues are the chart's defaults: what the program always sets has
// none, so a value it forgot fails the render (required) instead of taking
// a default it did not choose.
const defaultValues = `image: {}
runners: {}
metrics: {}
service: {}
sessionServer: {}
rbac: {}
serviceAccount: {}
`

// serviceTemplate is the chart's metrics Service, when service.enabled.
const serviceTemplate = `{{- if .Values.service.enabled }}
apiVersion: v1
kind: Service
metadata:
  name: {{ .Values.fullnameOverride }}
  namespace: {{ .Release.Namespace }}
spec:
  selector:
    @APP@: {{ .Values.fullnameOverride }}
  ports:
    - name: {{ .Values.metrics.portName }}
      port: {{ .Values.metrics.port | int64 }}
      targetPort: {{ .Values.metrics.portName }}
{{- end }}
`

// deploymentTemplate is the manager's Deployment. The container runs the
// program's preEntrypointScript and then the stand-in as gitlab-runner, as
// the chart's entrypoint does; CONFIG_PATH_FOR_INIT is where the script
// writes config.toml (the chart's image's gitlab-runner home).
const deploymentTemplate = `{{- $name := required "fullnameOverride: the release's name" .Values.fullnameOverride }}
{{- if .Values.rbac.create }}{{ fail "rbac.create: the stand-in chart creates no RBAC" }}{{ end }}
{{- if .Values.serviceAccount.create }}{{ fail "serviceAccount.create: the stand-in chart creates no ServiceAccount; name one" }}{{ end }}
{{- if .Values.sessionServer.enabled }}{{ fail "sessionServer.enabled: the stand-in runner has no session server" }}{{ end }}
{{- if .Values.unregisterRunners }}{{ fail "unregisterRunners: the stand-in chart has no unregister hook" }}{{ end }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    @APP@: {{ $name }}
    {{- with .Values.deploymentLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  replicas: {{ required "replicas" .Values.replicas | int64 }}
  selector:
    matchLabels:
      @APP@: {{ $name }}
  {{- with .Values.strategy }}
  strategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  template:
    metadata:
      labels:
        @APP@: {{ $name }}
        {{- with .Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ required "serviceAccount.name" .Values.serviceAccount.name }}
      terminationGracePeriodSeconds: {{ required "terminationGracePeriodSeconds" .Values.terminationGracePeriodSeconds | int64 }}
      {{- with .Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.volumeMounts }}
      # A host-path volume takes no fsGroup (the chart's podSecurityContext
      # makes a cloud disk its runner's): as root, give the runner's user
      # the program's volumes, as the disk's fsGroup would.
      initContainers:
        - name: volume-owner
          image: "{{ $.Values.image.registry }}/{{ $.Values.image.image }}:{{ $.Values.image.tag }}"
          imagePullPolicy: IfNotPresent
          securityContext:
            runAsUser: 0
          command: ["/bin/sh", "-c"]
          args:
            - chown @OWNER@{{ range . }} {{ .mountPath | squote }}{{ end }}
          volumeMounts:
            {{- toYaml . | nindent 12 }}
      {{- end }}
      containers:
        - name: {{ $name }}
          image: "{{ required "image.registry" .Values.image.registry }}/{{ required "image.image" .Values.image.image }}:{{ required "image.tag" .Values.image.tag }}"
          imagePullPolicy: IfNotPresent
          command: ["/bin/sh", "-c"]
          args:
            - |
              {{- required "preEntrypointScript" .Values.preEntrypointScript | nindent 14 }}
              exec gitlab-runner run --config "${CONFIG_PATH_FOR_INIT%/}/config.toml"
          env:
            - name: CONFIG_PATH_FOR_INIT
              value: /home/gitlab-runner/.gitlab-runner/
            - name: HOME
              value: /home/gitlab-runner
            - name: CI_SERVER_URL
              value: {{ required "gitlabUrl" .Values.gitlabUrl | quote }}
            - name: RUNNER_NAME
              value: {{ .Values.runners.name | quote }}
            - name: RUNNER_EXECUTOR
              value: {{ .Values.runners.executor | quote }}
            - name: CONCURRENT
              value: {{ .Values.concurrent | quote }}
            - name: CHECK_INTERVAL
              value: {{ .Values.checkInterval | quote }}
            - name: LOG_FORMAT
              value: {{ .Values.logFormat | quote }}
            - name: SHUTDOWN_TIMEOUT
              value: {{ .Values.shutdown_timeout | quote }}
            {{- with .Values.envVars }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with .Values.deploymentLifecycle }}
          lifecycle:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- if .Values.metrics.enabled }}
          ports:
            - name: {{ .Values.metrics.portName }}
              containerPort: {{ .Values.metrics.port | int64 }}
          {{- end }}
          {{- with .Values.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          volumeMounts:
            - name: runner-secrets
              mountPath: /secrets
            - name: etc-gitlab-runner
              mountPath: /home/gitlab-runner/.gitlab-runner
            - name: config-template
              mountPath: /configmaps
            {{- with .Values.volumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: runner-secrets
          projected:
            sources:
              - secret:
                  name: {{ required "runners.secret" .Values.runners.secret }}
                  items:
                    - key: @TOKEN_KEY@
                      path: @TOKEN_KEY@
              {{- range .Values.secrets }}
              - secret:
                  {{- toYaml . | nindent 18 }}
              {{- end }}
        - name: etc-gitlab-runner
          emptyDir:
            medium: Memory
        - name: config-template
          configMap:
            name: {{ $name }}
        {{- with .Values.volumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
---
# The runner configuration template, as the chart keeps it for its
# registration step (the stand-in registers nothing).
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
data:
  config.template.toml: {{ .Values.runners.config | quote }}
`
