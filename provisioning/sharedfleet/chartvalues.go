package sharedfleet

import (
	"fmt"
	"sort"
	"strings"
)

// ChartValues are the values of the gitlab-runner chart that the program
// may pass, each one the chart's templates read as .Values.<path>. A path
// marked whole is a subtree the templates hand to Kubernetes as it is
// (toYaml): what lies under it is a Kubernetes type, not a chart value.
//
// Source: the chart's templates and values.yaml of chart 0.86.0 (the
// reference copy the project reads, ../shared/reference/gitlab-runner-chart);
// every path was found there as .Values.<path>. No Go module serves the
// chart, so this list is the fact the program is checked against
// (TestEveryChartValueIsOneThePinnedChartReads), and
// TestChartValuesAreReadByTheChartsTemplates checks the list itself against
// the templates of the reference copy beside the checkout (it fails where
// that copy is missing).
var ChartValues = map[string]bool{
	"fullnameOverride":              false,
	"replicas":                      false,
	"gitlabUrl":                     false,
	"runners.secret":                false,
	"runners.name":                  false,
	"runners.executor":              false,
	"runners.config":                false,
	"unregisterRunners":             false,
	"concurrent":                    false,
	"checkInterval":                 false,
	"logFormat":                     false,
	"shutdown_timeout":              false,
	"terminationGracePeriodSeconds": false,
	"strategy":                      true,
	"deploymentLifecycle":           true,
	"metrics.enabled":               false,
	"metrics.portName":              false,
	"metrics.port":                  false,
	"service.enabled":               false,
	"sessionServer.enabled":         false,
	"rbac.create":                   false,
	"serviceAccount.create":         false,
	"serviceAccount.name":           false,
	"deploymentLabels":              true,
	"podAnnotations":                true,
	"podLabels":                     true,
	"nodeSelector":                  true,
	"tolerations":                   true,
	"resources":                     true,
	"preEntrypointScript":           false,
	"secrets":                       true,
	"volumes":                       true,
	"volumeMounts":                  true,
	"envVars":                       true,
	"image.registry":                false,
	"image.image":                   false,
	"image.tag":                     false,
	"affinity":                      true,
	"priorityClassName":             false,
}

// CheckChartValues returns the value paths of v that the chart does not
// read (ChartValues), sorted.
func CheckChartValues(v map[string]any) []string {
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, x := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			if whole, ok := ChartValues[p]; ok {
				if sub, isMap := x.(map[string]any); isMap && !whole {
					out = append(out, fmt.Sprintf("%s: the chart reads it as a value, not a table (%d keys given)", p, len(sub)))
				}
				continue
			}
			if sub, ok := x.(map[string]any); ok && hasPrefix(p+".") {
				walk(p, sub)
				continue
			}
			out = append(out, p+": the pinned gitlab-runner chart reads no such value")
		}
	}
	walk("", v)
	sort.Strings(out)
	return out
}

func hasPrefix(p string) bool {
	for k := range ChartValues {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}
