package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/api/option"

	"github.com/runnerfleet/runnerfleet/providers/gcp/quotaexporter"
)

// quotaExporterOptions are fleet quota-exporter's flags.
type quotaExporterOptions struct {
	project string
	regions []string
	listen  string
}

// quotaExporterCmd serves a project's regional Compute quotas on /metrics
// for the shared fleet's Prometheus.
func quotaExporterCmd(stderr io.Writer) *cobra.Command {
	var o quotaExporterOptions
	cmd := &cobra.Command{
		Use:     "quota-exporter",
		GroupID: "vm",
		Short:   "Serve a project's regional Compute Engine quotas as Prometheus gauges",
		Long: `fleet quota-exporter serves, on /metrics, the quotas of each --region of
--project as Compute Engine reports them (regions.get: every quota's metric,
limit and usage), read on every scrape:

  ` + quotaexporter.MetricLimit + `{project,region,metric}
  ` + quotaexporter.MetricUsage + `{project,region,metric}
  ` + quotaexporter.MetricUp + `{project,region}   0 when regions.get failed

Its identity needs only the permission ` + quotaexporter.Role + ` (in
roles/compute.viewer). It uses Application Default Credentials (on GKE, the
Workload Identity of its Kubernetes service account).`,
		Example: `  fleet quota-exporter --project ci-prod --region us-central1 --region europe-west4`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serveQuotaExporter(cmd.Context(), o, nil, stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.project, "project", "", "the Google Cloud project whose quotas to publish (required)")
	f.StringSliceVar(&o.regions, "region", nil, "a region the fleet's VMs run in, such as us-central1 (required; repeatable)")
	f.StringVar(&o.listen, "listen", ":"+strconv.Itoa(quotaexporter.DefaultPort), "where to serve /metrics")
	return cmd
}

// serveQuotaExporter serves until ctx ends; ready, if not nil, gets the
// address it listens on. opts are the Compute client's (tests point it at
// gcetest).
func serveQuotaExporter(ctx context.Context, o quotaExporterOptions, ready chan<- string, stderr io.Writer, opts ...option.ClientOption) error {
	c, err := quotaexporter.New(ctx, o.project, o.regions, stderr, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "fleet quota-exporter: serving the quotas of project %s, regions %v, on http://%s/metrics\n", o.project, o.regions, l.Addr())
	if ready != nil {
		ready <- l.Addr().String()
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return err
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
