// Package gcp implements runnerfleet's providers.Compute for Google Compute
// Engine with the cloud.google.com/go/compute/apiv1 REST clients, and
// providers.Self for the drain agent on a GCE VM through the VM's metadata
// server. Package gcetest beside it has loopback fakes of both.
//
// The drain handshake: RequestDrain sets instance metadata
// runnerfleet-drain=true (setMetadata, with the metadata fingerprint); the
// agent long-polls instance/attributes/runnerfleet-drain on the metadata
// server (wait_for_change with last_etag), stops its runner, and PUTs guest
// attributes runnerfleet/drain-phase, drain-jobs-left and drain-updated-at,
// which DrainState reads with instances.getGuestAttributes. Guest
// attributes must be enabled on the VM: CreateInstance sets
// enable-guest-attributes=TRUE in its metadata.
package gcp

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/runnerfleet/runnerfleet/providers"
	"github.com/runnerfleet/runnerfleet/providers/gcp/gcenames"
)

// Metadata keys CreateInstance sets besides the spec's.
const (
	// GuestAttributesKey enables guest attributes on the VM, without which
	// the agent's reports are refused by its metadata server.
	GuestAttributesKey = gcenames.GuestAttributesKey
	// ImageKey records the boot disk's source image: an instance resource
	// does not carry it (only the disk resource does), and ListInstances
	// reports it as Instance.Image.
	ImageKey = gcenames.ImageMetadataKey
	// CreatedByKey is the metadata a managed instance group sets on its
	// instances: the group's URL.
	CreatedByKey = "created-by"
)

var _ providers.Compute = (*Compute)(nil)

// Compute is providers.Compute on Compute Engine, for one project and a set
// of zones.
type Compute struct {
	project   string
	zones     map[string]bool // nil: every zone
	instances *compute.InstancesClient
	images    *compute.ImagesClient
	zoneOps   *compute.ZoneOperationsClient
	globalOps *compute.GlobalOperationsClient

	// lists counts list calls in progress, including those abandoned by
	// untilDone; Close waits for them.
	lists sync.WaitGroup

	// opPollMin and opPollMax pace operations.wait calls that return
	// before the operation is DONE (the API's wait is best effort).
	opPollMin, opPollMax time.Duration
}

// New makes a Compute for project, covering zones in ListInstances (all the
// project's zones if zones is empty). opts are the clients' options
// (credentials, endpoint, …); gcetest.Server.ClientOptions points them at
// the fake. Close releases the clients.
//
// ListInstances uses one instances.aggregatedList (every zone in one paged
// call, the zones outside the set skipped), not a list per zone.
func New(ctx context.Context, project string, zones []string, opts ...option.ClientOption) (*Compute, error) {
	if project == "" {
		return nil, errors.New("gcp: project is required")
	}
	c := &Compute{project: project, opPollMin: 250 * time.Millisecond, opPollMax: 5 * time.Second}
	if len(zones) > 0 {
		c.zones = map[string]bool{}
		for _, z := range zones {
			c.zones[z] = true
		}
	}
	var err error
	if c.instances, err = compute.NewInstancesRESTClient(ctx, opts...); err != nil {
		return nil, fmt.Errorf("gcp: instances client: %w", err)
	}
	if c.images, err = compute.NewImagesRESTClient(ctx, opts...); err != nil {
		c.Close()
		return nil, fmt.Errorf("gcp: images client: %w", err)
	}
	if c.zoneOps, err = compute.NewZoneOperationsRESTClient(ctx, opts...); err != nil {
		c.Close()
		return nil, fmt.Errorf("gcp: zone operations client: %w", err)
	}
	if c.globalOps, err = compute.NewGlobalOperationsRESTClient(ctx, opts...); err != nil {
		c.Close()
		return nil, fmt.Errorf("gcp: global operations client: %w", err)
	}
	return c, nil
}

// Close closes the API clients. It first waits for list calls abandoned
// when their context ended: they end with their HTTP request, which the SDK
// sends without the context, and the clients may not close under them.
func (c *Compute) Close() error {
	c.lists.Wait()
	var errs []error
	if c.instances != nil {
		errs = append(errs, c.instances.Close())
	}
	if c.images != nil {
		errs = append(errs, c.images.Close())
	}
	if c.zoneOps != nil {
		errs = append(errs, c.zoneOps.Close())
	}
	if c.globalOps != nil {
		errs = append(errs, c.globalOps.Close())
	}
	return errors.Join(errs...)
}

// Project is the project the Compute works in.
func (c *Compute) Project() string { return c.project }

// labelFilter is the list filter for instances carrying all labels:
// parenthesized expressions side by side are ANDed by the API.
func labelFilter(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("(labels.%s = %s)", k, strconv.Quote(labels[k])))
	}
	return strings.Join(parts, " ")
}

// ListInstances lists the instances in the covered zones carrying all
// labels, by zone and name. The labels are filtered by the API and checked
// again here.
func (c *Compute) ListInstances(ctx context.Context, labels map[string]string) ([]providers.Instance, error) {
	out, err := untilDone(ctx, &c.lists, func() ([]providers.Instance, error) { return c.listInstances(ctx, labels) })
	if err != nil {
		return nil, wrap(err, "listing instances in project %s", c.project)
	}
	return out, nil
}

func (c *Compute) listInstances(ctx context.Context, labels map[string]string) ([]providers.Instance, error) {
	req := &computepb.AggregatedListInstancesRequest{Project: c.project}
	if len(labels) > 0 {
		req.Filter = proto.String(labelFilter(labels))
	}
	it := c.instances.AggregatedList(ctx, req)
	var out []providers.Instance
	for {
		pair, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, err
		}
		zone, ok := strings.CutPrefix(pair.Key, "zones/")
		if !ok || (c.zones != nil && !c.zones[zone]) {
			continue
		}
		for _, in := range pair.Value.GetInstances() {
			if !hasLabels(in.GetLabels(), labels) {
				continue
			}
			out = append(out, toInstance(in))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Zone != out[j].Zone {
			return out[i].Zone < out[j].Zone
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// untilDone runs fn but returns when ctx ends: the REST clients' paged
// list calls (aggregatedList, list) send their HTTP requests without the
// call's context, so a hung page would otherwise outlive any deadline. The
// abandoned call ends with its HTTP request; wg counts it until then.
func untilDone[T any](ctx context.Context, wg *sync.WaitGroup, fn func() ([]T, error)) ([]T, error) {
	type result struct {
		v   []T
		err error
	}
	ch := make(chan result, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// CloudPlatformScope is the OAuth scope of a VM's service account: all of
// Google Cloud, narrowed by the account's roles alone (Google's advice).
const CloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

// CreateInstance creates an instance with an internal IP only (spec's
// network and subnetwork, else the default network; no access config),
// running as spec's service account if any, a boot disk from spec.Image, spec's labels
// and metadata (plus enable-guest-attributes=TRUE and runnerfleet-image),
// as a Spot VM deleted on preemption if spec.Spot, and waits for the
// operation.
func (c *Compute) CreateInstance(ctx context.Context, spec providers.InstanceSpec) (providers.Instance, error) {
	what := fmt.Sprintf("creating instance %s in %s", spec.Name, spec.Zone)
	switch {
	case spec.Name == "":
		return providers.Instance{}, errors.New("creating instance: name is required")
	case spec.Zone == "":
		return providers.Instance{}, fmt.Errorf("%s: zone is required", what)
	case spec.MachineType == "":
		return providers.Instance{}, fmt.Errorf("%s: machine type is required", what)
	case spec.Image == "":
		return providers.Instance{}, fmt.Errorf("%s: image is required", what)
	}
	image := c.imageURL(spec.Image)
	res := &computepb.Instance{
		Name:        proto.String(spec.Name),
		MachineType: proto.String(machineTypeURL(spec.Zone, spec.MachineType)),
		Disks: []*computepb.AttachedDisk{{
			Boot:       proto.Bool(true),
			AutoDelete: proto.Bool(true),
			Type:       proto.String(computepb.AttachedDisk_PERSISTENT.String()),
			InitializeParams: &computepb.AttachedDiskInitializeParams{
				SourceImage: proto.String(image),
			},
		}},
		// No AccessConfigs: the VM gets an internal IP only.
		NetworkInterfaces: []*computepb.NetworkInterface{{
			Network: proto.String(cmp.Or(spec.Network, "global/networks/default")),
		}},
		Labels:   copyMap(spec.Labels),
		Metadata: &computepb.Metadata{Items: metadataItems(spec.Metadata, image)},
	}
	if spec.Subnetwork != "" {
		res.NetworkInterfaces[0].Subnetwork = proto.String(spec.Subnetwork)
	}
	if spec.ServiceAccount != "" {
		res.ServiceAccounts = []*computepb.ServiceAccount{{Email: proto.String(spec.ServiceAccount), Scopes: []string{CloudPlatformScope}}}
	}
	if spec.Spot {
		res.Scheduling = &computepb.Scheduling{
			ProvisioningModel:         proto.String(computepb.Scheduling_SPOT.String()),
			InstanceTerminationAction: proto.String(computepb.Scheduling_DELETE.String()),
			AutomaticRestart:          proto.Bool(false),
			OnHostMaintenance:         proto.String(computepb.Scheduling_TERMINATE.String()),
		}
	}
	op, err := c.instances.Insert(ctx, &computepb.InsertInstanceRequest{
		Project:          c.project,
		Zone:             spec.Zone,
		InstanceResource: res,
		// The same request ID makes a retried insert the same operation.
		RequestId: proto.String(newRequestID()),
	})
	if err != nil {
		return providers.Instance{}, wrap(err, "%s", what)
	}
	if err := c.waitZoneOp(ctx, spec.Zone, op.Proto()); err != nil {
		return providers.Instance{}, wrap(err, "%s", what)
	}
	in, err := c.instances.Get(ctx, &computepb.GetInstanceRequest{Project: c.project, Zone: spec.Zone, Instance: spec.Name})
	if err != nil {
		return providers.Instance{Name: spec.Name, Zone: spec.Zone, Labels: copyMap(spec.Labels), Image: imageName(image)},
			wrap(err, "%s: reading it back", what)
	}
	return toInstance(in), nil
}

// imageURL makes spec.Image a partial URL the API takes: a bare name is an
// image of the project, family/NAME its family; URLs pass as they are.
func (c *Compute) imageURL(img string) string {
	switch {
	case strings.Contains(img, "://"), strings.HasPrefix(img, "projects/"), strings.HasPrefix(img, "global/"):
		return img
	default:
		return "projects/" + c.project + "/global/images/" + img
	}
}

func machineTypeURL(zone, mt string) string {
	if strings.Contains(mt, "/") {
		return mt
	}
	return "zones/" + zone + "/machineTypes/" + mt
}

// imageName is the image's name when ref names an image (…/global/images/NAME),
// else ref as it is (a family reference, say).
func imageName(ref string) string {
	i := strings.LastIndex(ref, "/global/images/")
	if i < 0 {
		if n, ok := strings.CutPrefix(ref, "global/images/"); ok && !strings.Contains(n, "/") {
			return n
		}
		return ref
	}
	n := ref[i+len("/global/images/"):]
	if strings.Contains(n, "/") {
		return ref
	}
	return n
}

func metadataItems(md map[string]string, image string) []*computepb.Items {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var items []*computepb.Items
	for _, k := range keys {
		items = append(items, &computepb.Items{Key: proto.String(k), Value: proto.String(md[k])})
	}
	if _, ok := md[GuestAttributesKey]; !ok {
		items = append(items, &computepb.Items{Key: proto.String(GuestAttributesKey), Value: proto.String("TRUE")})
	}
	if _, ok := md[ImageKey]; !ok {
		items = append(items, &computepb.Items{Key: proto.String(ImageKey), Value: proto.String(image)})
	}
	return items
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// DeleteInstance deletes an instance and waits for the operation; an
// instance that does not exist (or is gone by the end) counts as deleted.
func (c *Compute) DeleteInstance(ctx context.Context, zone, name string) error {
	op, err := c.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: c.project, Zone: zone, Instance: name})
	if httpCode(err) == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return wrap(err, "deleting instance %s in %s", name, zone)
	}
	if err := c.waitZoneOp(ctx, zone, op.Proto()); err != nil && httpCode(err) != http.StatusNotFound {
		return wrap(err, "deleting instance %s in %s", name, zone)
	}
	return nil
}

// RequestDrain sets metadata runnerfleet-drain=true on the instance.
func (c *Compute) RequestDrain(ctx context.Context, zone, name string) error {
	return c.setMetadataItem(ctx, zone, name, providers.GCEDrainKey, "true", fmt.Sprintf("requesting drain of instance %s in %s", name, zone))
}

// NoteMetadataKey is the instance metadata key of note key.
func NoteMetadataKey(key string) string { return gcenames.NoteMetadataKey(key) }

// Note sets metadata runnerfleet-note-<key>=value on the instance, or
// removes the item when value is empty.
func (c *Compute) Note(ctx context.Context, zone, name, key, value string) error {
	return c.setMetadataItem(ctx, zone, name, NoteMetadataKey(key), value, fmt.Sprintf("noting %s on instance %s in %s", key, name, zone))
}

// setMetadataItem sets (value "": removes) one metadata item, keeping the
// others: setMetadata replaces the whole list and must carry the
// fingerprint read with it, so a concurrent writer makes it fail with 412,
// and then it reads and tries again, once.
func (c *Compute) setMetadataItem(ctx context.Context, zone, name, key, value, what string) error {
	for attempt := 0; ; attempt++ {
		in, err := c.instances.Get(ctx, &computepb.GetInstanceRequest{Project: c.project, Zone: zone, Instance: name})
		if err != nil {
			return wrap(err, "%s", what)
		}
		md := in.GetMetadata()
		var items []*computepb.Items
		found := false
		for _, it := range md.GetItems() {
			if it.GetKey() == key {
				if it.GetValue() == value {
					return nil // already so
				}
				found = true
				if value == "" {
					continue
				}
				it = &computepb.Items{Key: proto.String(key), Value: proto.String(value)}
			}
			items = append(items, it)
		}
		if !found && value == "" {
			return nil
		}
		if !found {
			items = append(items, &computepb.Items{Key: proto.String(key), Value: proto.String(value)})
		}
		op, err := c.instances.SetMetadata(ctx, &computepb.SetMetadataInstanceRequest{
			Project: c.project, Zone: zone, Instance: name,
			MetadataResource: &computepb.Metadata{Fingerprint: md.Fingerprint, Items: items},
		})
		if err == nil {
			err = c.waitZoneOp(ctx, zone, op.Proto())
		}
		if httpCode(err) == http.StatusPreconditionFailed && attempt == 0 {
			continue // the metadata changed since we read it
		}
		if err != nil {
			return wrap(err, "%s", what)
		}
		return nil
	}
}

// ImageExists gets the image (projects/P/global/images/N, …/family/F, a
// bare name or family/F of the project).
func (c *Compute) ImageExists(ctx context.Context, ref string) error {
	project, rest := c.project, ref
	if i := strings.Index(ref, "projects/"); i >= 0 {
		parts := strings.SplitN(ref[i+len("projects/"):], "/", 2)
		project = parts[0]
		if len(parts) > 1 {
			rest = parts[1]
		}
	}
	rest = strings.TrimPrefix(strings.TrimPrefix(rest, "global/"), "images/")
	var err error
	if fam, ok := strings.CutPrefix(rest, "family/"); ok {
		_, err = c.images.GetFromFamily(ctx, &computepb.GetFromFamilyImageRequest{Project: project, Family: fam})
	} else {
		_, err = c.images.Get(ctx, &computepb.GetImageRequest{Project: project, Image: rest})
	}
	if err != nil {
		return wrap(err, "getting image %s", ref)
	}
	return nil
}

// JobReport reads the guest attributes runnerfleet/jobs and
// runnerfleet/jobs-updated-at a job reporter wrote; none is a report not
// Found, an instance that does not exist ErrNotFound.
func (c *Compute) JobReport(ctx context.Context, zone, name string) (providers.JobReport, error) {
	what := fmt.Sprintf("reading the job report of instance %s in %s", name, zone)
	ga, err := c.instances.GetGuestAttributes(ctx, &computepb.GetGuestAttributesInstanceRequest{
		Project: c.project, Zone: zone, Instance: name,
		QueryPath: proto.String(providers.GCEGuestNamespace + "/"),
	})
	if httpCode(err) == http.StatusNotFound {
		if _, gerr := c.instances.Get(ctx, &computepb.GetInstanceRequest{Project: c.project, Zone: zone, Instance: name}); gerr != nil {
			return providers.JobReport{}, wrap(gerr, "%s", what)
		}
		return providers.JobReport{}, nil
	}
	if err != nil {
		return providers.JobReport{}, wrap(err, "%s", what)
	}
	var n, at string
	for _, e := range ga.GetQueryValue().GetItems() {
		if e.GetNamespace() != providers.GCEGuestNamespace {
			continue
		}
		switch e.GetKey() {
		case providers.GCEGuestJobsKey:
			n = strings.TrimSpace(e.GetValue())
		case providers.GCEGuestJobsUpdatedAtKey:
			at = strings.TrimSpace(e.GetValue())
		}
	}
	if n == "" || at == "" {
		return providers.JobReport{}, nil
	}
	jobs, err := strconv.Atoi(n)
	if err != nil || jobs < 0 {
		return providers.JobReport{}, fmt.Errorf("%s: runnerfleet/%s=%q is not a job count", what, providers.GCEGuestJobsKey, n)
	}
	ts, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return providers.JobReport{}, fmt.Errorf("%s: runnerfleet/%s=%q: %w", what, providers.GCEGuestJobsUpdatedAtKey, at, err)
	}
	return providers.JobReport{Found: true, Jobs: jobs, UpdatedAt: ts}, nil
}

// DrainState reads the guest attributes runnerfleet/ of the instance. An
// instance whose agent wrote nothing yet (no guest attributes there: 404)
// is DrainNone; an instance that does not exist is ErrNotFound.
func (c *Compute) DrainState(ctx context.Context, zone, name string) (providers.DrainState, error) {
	what := fmt.Sprintf("reading drain state of instance %s in %s", name, zone)
	ga, err := c.instances.GetGuestAttributes(ctx, &computepb.GetGuestAttributesInstanceRequest{
		Project: c.project, Zone: zone, Instance: name,
		QueryPath: proto.String(providers.GCEGuestNamespace + "/"),
	})
	if httpCode(err) == http.StatusNotFound {
		// No attributes under the path, or no instance: tell them apart.
		if _, gerr := c.instances.Get(ctx, &computepb.GetInstanceRequest{Project: c.project, Zone: zone, Instance: name}); gerr != nil {
			return providers.DrainState{}, wrap(gerr, "%s", what)
		}
		return providers.DrainState{Phase: providers.DrainNone}, nil
	}
	if err != nil {
		return providers.DrainState{}, wrap(err, "%s", what)
	}
	var st providers.DrainState
	for _, e := range ga.GetQueryValue().GetItems() {
		if e.GetNamespace() != providers.GCEGuestNamespace {
			continue
		}
		v := strings.TrimSpace(e.GetValue())
		switch e.GetKey() {
		case providers.GCEGuestPhaseKey:
			st.Phase = providers.DrainPhase(v)
		case providers.GCEGuestJobsLeftKey:
			// A malformed count reads as 0 rather than failing the phase.
			st.JobsLeft, _ = strconv.Atoi(v)
		case providers.GCEGuestUpdatedAtKey:
			st.UpdatedAt, _ = time.Parse(time.RFC3339Nano, v)
		}
	}
	return st, nil
}

// ListImages lists the project's images of family, newest first. The API
// filters by family but refuses a filter together with a sort order, so
// the sort is done here.
func (c *Compute) ListImages(ctx context.Context, family string) ([]providers.Image, error) {
	out, err := untilDone(ctx, &c.lists, func() ([]providers.Image, error) { return c.listImages(ctx, family) })
	if err != nil {
		return nil, wrap(err, "listing images of family %s in project %s", family, c.project)
	}
	return out, nil
}

func (c *Compute) listImages(ctx context.Context, family string) ([]providers.Image, error) {
	it := c.images.List(ctx, &computepb.ListImagesRequest{
		Project: c.project,
		Filter:  proto.String("family = " + strconv.Quote(family)),
	})
	var out []providers.Image
	for {
		img, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, err
		}
		if img.GetFamily() != family {
			continue
		}
		created, _ := time.Parse(time.RFC3339Nano, img.GetCreationTimestamp())
		out = append(out, providers.Image{
			ID:        strconv.FormatUint(img.GetId(), 10),
			Name:      img.GetName(),
			Family:    img.GetFamily(),
			Labels:    copyMap(img.GetLabels()),
			CreatedAt: created,
		})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].Name > out[j].Name
	})
	return out, nil
}

// DeleteImage deletes an image of the project and waits for the global
// operation; one that does not exist counts as deleted.
func (c *Compute) DeleteImage(ctx context.Context, name string) error {
	op, err := c.images.Delete(ctx, &computepb.DeleteImageRequest{Project: c.project, Image: name})
	if httpCode(err) == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return wrap(err, "deleting image %s", name)
	}
	if err := c.waitGlobalOp(ctx, op.Proto()); err != nil && httpCode(err) != http.StatusNotFound {
		return wrap(err, "deleting image %s", name)
	}
	return nil
}

// waitZoneOp waits for a zone operation with operations.wait, which returns
// when the operation is DONE or after up to two minutes; calls that come
// back early are paced, and transient errors of the wait retried.
func (c *Compute) waitZoneOp(ctx context.Context, zone string, op *computepb.Operation) error {
	return c.waitOp(ctx, op, func(ctx context.Context, name string) (*computepb.Operation, error) {
		return c.zoneOps.Wait(ctx, &computepb.WaitZoneOperationRequest{Project: c.project, Zone: zone, Operation: name})
	})
}

func (c *Compute) waitGlobalOp(ctx context.Context, op *computepb.Operation) error {
	return c.waitOp(ctx, op, func(ctx context.Context, name string) (*computepb.Operation, error) {
		return c.globalOps.Wait(ctx, &computepb.WaitGlobalOperationRequest{Project: c.project, Operation: name})
	})
}

func (c *Compute) waitOp(ctx context.Context, op *computepb.Operation, wait func(context.Context, string) (*computepb.Operation, error)) error {
	name := op.GetName()
	pause := c.opPollMin
	failures := 0
	for op.GetStatus() != computepb.Operation_DONE {
		start := time.Now()
		next, err := wait(ctx, name)
		switch {
		case err == nil:
			op, failures = next, 0
			if op.GetStatus() == computepb.Operation_DONE || time.Since(start) >= pause {
				pause = c.opPollMin
				continue
			}
		case ctx.Err() != nil:
			return fmt.Errorf("waiting for operation %s: %w", name, ctx.Err())
		case transient(err) && failures < 5:
			failures++
		default:
			return fmt.Errorf("waiting for operation %s: %w", name, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for operation %s: %w", name, ctx.Err())
		case <-t.C:
		}
		pause = min(pause*2, c.opPollMax)
	}
	return opError(op)
}

// opError is the error of a DONE operation, as a *googleapi.Error with the
// operation's HTTP status so httpCode sees it.
func opError(op *computepb.Operation) error {
	if op.GetError() == nil || len(op.GetError().GetErrors()) == 0 {
		if code := op.GetHttpErrorStatusCode(); code != 0 && (code < 200 || code > 299) {
			return &googleapi.Error{Code: int(code), Message: fmt.Sprintf("operation %s failed: %s", op.GetName(), op.GetHttpErrorMessage())}
		}
		return nil
	}
	var msgs []string
	var items []googleapi.ErrorItem
	for _, e := range op.GetError().GetErrors() {
		msgs = append(msgs, e.GetCode()+": "+e.GetMessage())
		items = append(items, googleapi.ErrorItem{Reason: e.GetCode(), Message: e.GetMessage()})
	}
	code := int(op.GetHttpErrorStatusCode())
	if code == 0 {
		code = http.StatusInternalServerError
	}
	return &googleapi.Error{
		Code:    code,
		Message: fmt.Sprintf("operation %s failed: %s", op.GetName(), strings.Join(msgs, "; ")),
		Errors:  items,
	}
}

// httpCode is the HTTP status of an API error, 0 if err is not one.
func httpCode(err error) int {
	if err == nil {
		return 0
	}
	var ae *apierror.APIError
	if errors.As(err, &ae) && ae.HTTPCode() > 0 {
		return ae.HTTPCode()
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	return 0
}

func transient(err error) bool {
	switch httpCode(err) {
	case 0:
		return true // the connection, not the API
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// wrap names what failed; a 404 also wraps providers.ErrNotFound.
func wrap(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if httpCode(err) == http.StatusNotFound {
		return fmt.Errorf("%s: %w: %w", what, providers.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func toInstance(in *computepb.Instance) providers.Instance {
	out := providers.Instance{
		Name:   in.GetName(),
		ID:     strconv.FormatUint(in.GetId(), 10),
		Zone:   lastSegment(in.GetZone()),
		Labels: copyMap(in.GetLabels()),
		State:  toState(in.GetStatus()),
	}
	for _, it := range in.GetMetadata().GetItems() {
		switch k := it.GetKey(); {
		case k == ImageKey:
			out.Image = imageName(it.GetValue())
		case k == CreatedByKey:
			out.ManagedBy = it.GetValue()
		case strings.HasPrefix(k, providers.GCENotePrefix):
			if out.Notes == nil {
				out.Notes = map[string]string{}
			}
			out.Notes[strings.TrimPrefix(k, providers.GCENotePrefix)] = it.GetValue()
		}
	}
	if nics := in.GetNetworkInterfaces(); len(nics) > 0 {
		out.Address = nics[0].GetNetworkIP()
	}
	out.CreatedAt, _ = time.Parse(time.RFC3339Nano, in.GetCreationTimestamp())
	return out
}

func lastSegment(u string) string {
	if i := strings.LastIndex(u, "/"); i >= 0 {
		return u[i+1:]
	}
	return u
}

// toState maps the Compute API's instance status.
func toState(s string) providers.State {
	switch s {
	case "PROVISIONING", "STAGING":
		return providers.StateProvisioning
	case "RUNNING", "REPAIRING":
		return providers.StateRunning
	case "STOPPING", "SUSPENDING", "PENDING_STOP":
		return providers.StateStopping
	case "TERMINATED", "SUSPENDED":
		return providers.StateStopped
	default:
		return providers.State(strings.ToLower(s))
	}
}
