package gcetest

import (
	"net/http"
	"regexp"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// Quota is one of a region's quotas as regions.get reports it.
type Quota struct {
	Metric string // INSTANCES, CPUS, N2D_CPUS, …
	Limit  float64
	Usage  float64
}

// SetRegionQuotas makes region known to regions.get, with these quotas (in
// this order, as the API lists them). A region never set answers 404, as
// the API does for a region that does not exist.
func (s *Server) SetRegionQuotas(region string, quotas ...Quota) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.regions == nil {
		s.regions = map[string][]Quota{}
	}
	s.regions[region] = append([]Quota(nil), quotas...)
}

var regionRE = regexp.MustCompile(`^[a-z]+-[a-z]+[0-9]+$`)

// getRegion is regions.get: the region's name, status, zones and quotas.
func (s *Server) getRegion(w http.ResponseWriter, r *http.Request) {
	if !s.checkProject(w, r) {
		return
	}
	name := r.PathValue("region")
	if !regionRE.MatchString(name) {
		invalid(w, "region", name, "Unknown region.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	qs, ok := s.regions[name]
	if !ok {
		notFound(w, "projects/"+s.project+"/regions/"+name)
		return
	}
	out := &computepb.Region{
		Kind:     proto.String("compute#region"),
		Name:     proto.String(name),
		Status:   proto.String("UP"),
		SelfLink: proto.String(s.projectURL() + "/regions/" + name),
	}
	for _, q := range qs {
		out.Quotas = append(out.Quotas, &computepb.Quota{Metric: proto.String(q.Metric), Limit: proto.Float64(q.Limit), Usage: proto.Float64(q.Usage)})
	}
	writeProto(w, out)
}
