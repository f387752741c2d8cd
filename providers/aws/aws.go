// Package aws implements runnerfleet's providers interfaces for Amazon EC2
// with aws-sdk-go-v2: Compute and SpotRequests for fleet operations, Self
// for the drain agent on a VM (IMDSv2 plus CreateTags on itself).
//
// On EC2 an instance's Name is its Name tag (unique per account and region by
// runnerfleet's convention, checked by CreateInstance), its Labels are its
// tags, and the drain handshake goes through tags: RequestDrain sets
// runnerfleet:drain=true, the agent reads it from instance metadata
// (instance metadata tags are enabled by CreateInstance) and answers with
// runnerfleet:drain-phase, -jobs-left and -updated-at, which DrainState
// reads back with DescribeInstances.
package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/runnerfleet/runnerfleet/providers"
)

var (
	_ providers.Compute      = (*Compute)(nil)
	_ providers.SpotRequests = (*Compute)(nil)
)

// Tag keys runnerfleet reads on instances and images.
const (
	NameTag   = "Name"
	FamilyTag = "family"
)

// UserDataKey is the InstanceSpec.Metadata key that becomes the instance's
// user data; other Metadata keys have no EC2 meaning and are ignored.
const UserDataKey = "user-data"

// Defaults of a new Compute.
const (
	DefaultWaitMinDelay  = 5 * time.Second
	DefaultWaitMaxDelay  = 30 * time.Second
	DefaultCreateTimeout = 10 * time.Minute
	DefaultDeleteTimeout = 10 * time.Minute
)

// liveStates are the instance-state-name values of instances that exist
// (EC2 filters cannot negate, so "not terminated" is spelt out).
var liveStates = []string{"pending", "running", "shutting-down", "stopping", "stopped"}

// Compute is providers.Compute and providers.SpotRequests on EC2, in the
// region of the aws.Config it was made from.
//
// The exported fields tune CreateInstance and the waiters; set them before
// first use and do not change them while calls are in flight.
//
// Its credentials need ec2:DescribeInstances, RunInstances, CreateTags (for
// tags on create too: ec2:CreateAction=RunInstances), TerminateInstances,
// DescribeImages, DeregisterImage, DeleteSnapshot,
// DescribeSpotInstanceRequests and CancelSpotInstanceRequests, plus
// iam:PassRole for InstanceProfile's role.
type Compute struct {
	client *ec2.Client

	// Subnets maps an availability zone to the subnet the instance's network
	// interface goes in. Without an entry EC2 uses the zone's default subnet.
	Subnets map[string]string
	// SecurityGroupIDs for the instance's network interface (default: the
	// VPC's default security group).
	SecurityGroupIDs []string
	// InstanceProfile is the IAM instance profile (name or ARN) instances
	// get. The drain agent needs its role to allow ec2:CreateTags on the
	// instance itself (see Self).
	InstanceProfile string

	// WaitMinDelay and WaitMaxDelay bound the SDK waiters' polling of
	// DescribeInstances (the SDK's own defaults are 15s and 120s).
	WaitMinDelay, WaitMaxDelay time.Duration
	// CreateTimeout bounds waiting for a new instance to run, DeleteTimeout
	// waiting for a deleted one to terminate.
	CreateTimeout, DeleteTimeout time.Duration
}

// New makes a Compute from an aws.Config; opts adjust the EC2 client (tests
// set BaseEndpoint, a retryer, …).
func New(cfg aws.Config, opts ...func(*ec2.Options)) *Compute {
	return &Compute{
		client:        ec2.NewFromConfig(cfg, opts...),
		WaitMinDelay:  DefaultWaitMinDelay,
		WaitMaxDelay:  DefaultWaitMaxDelay,
		CreateTimeout: DefaultCreateTimeout,
		DeleteTimeout: DefaultDeleteTimeout,
	}
}

// Client is the underlying EC2 client.
func (c *Compute) Client() *ec2.Client { return c.client }

// ListInstances lists the region's instances that are not terminated and
// carry all of labels (as tags), filtered server side.
func (c *Compute) ListInstances(ctx context.Context, labels map[string]string) ([]providers.Instance, error) {
	fs := []types.Filter{{Name: aws.String("instance-state-name"), Values: liveStates}}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fs = append(fs, types.Filter{Name: aws.String("tag:" + k), Values: []string{escapeFilter(labels[k])}})
	}
	ins, err := c.describe(ctx, fs)
	if err != nil {
		return nil, fmt.Errorf("aws: list instances labelled %v: %w", labels, err)
	}
	out := make([]providers.Instance, 0, len(ins))
	for _, in := range ins {
		out = append(out, instance(in))
	}
	return out, nil
}

// describe runs DescribeInstances with filters through every page.
func (c *Compute) describe(ctx context.Context, fs []types.Filter) ([]types.Instance, error) {
	var out []types.Instance
	p := ec2.NewDescribeInstancesPaginator(c.client, &ec2.DescribeInstancesInput{
		Filters:    fs,
		MaxResults: aws.Int32(1000),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out, nil
}

// byName finds the live instances whose Name tag is name, in zone if zone
// is not empty.
func (c *Compute) byName(ctx context.Context, zone, name string) ([]types.Instance, error) {
	fs := []types.Filter{
		{Name: aws.String("tag:" + NameTag), Values: []string{escapeFilter(name)}},
		{Name: aws.String("instance-state-name"), Values: liveStates},
	}
	if zone != "" {
		fs = append(fs, types.Filter{Name: aws.String("availability-zone"), Values: []string{escapeFilter(zone)}})
	}
	return c.describe(ctx, fs)
}

// one finds the single live instance called name in zone.
func (c *Compute) one(ctx context.Context, zone, name string) (types.Instance, error) {
	ins, err := c.byName(ctx, zone, name)
	if err != nil {
		return types.Instance{}, err
	}
	switch len(ins) {
	case 0:
		return types.Instance{}, fmt.Errorf("no live instance with Name tag %q in zone %q: %w", name, zone, providers.ErrNotFound)
	case 1:
		return ins[0], nil
	}
	ids := make([]string, 0, len(ins))
	for _, in := range ins {
		ids = append(ids, aws.ToString(in.InstanceId))
	}
	return types.Instance{}, fmt.Errorf("%d live instances carry Name tag %q in zone %q (%s)", len(ins), name, zone, strings.Join(ids, ", "))
}

// CreateInstance runs one instance and waits, with the SDK's
// InstanceRunningWaiter bounded by CreateTimeout, until it is running.
//
// The instance gets no public IP (its network interface has
// AssociatePublicIpAddress=false, so it needs a NAT or VPC endpoints to
// reach GitLab and AWS), the spec's labels plus Name as tags on itself and
// its volumes (and its spot request), Metadata["user-data"] as user data,
// IMDSv2 required with instance metadata tags enabled (the drain agent reads
// runnerfleet:drain there; tag keys must then be letters, digits and
// + - = . , _ : @ only) and, if Spot, a one-time spot request that
// terminates on interruption. Another live instance with the same Name is an
// error. If waiting fails, the instance is left for DeleteInstance.
func (c *Compute) CreateInstance(ctx context.Context, spec providers.InstanceSpec) (providers.Instance, error) {
	where := spec.Name
	if spec.Zone != "" {
		where += " in " + spec.Zone
	}
	switch {
	case spec.Name == "":
		return providers.Instance{}, errors.New("aws: create instance: no name")
	case spec.Image == "":
		return providers.Instance{}, fmt.Errorf("aws: create instance %s: no image", where)
	case spec.MachineType == "":
		return providers.Instance{}, fmt.Errorf("aws: create instance %s: no instance type", where)
	}
	existing, err := c.byName(ctx, "", spec.Name)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("aws: create instance %s: looking for one with that name: %w", where, err)
	}
	if len(existing) > 0 {
		return providers.Instance{}, fmt.Errorf("aws: create instance %s: %s already carries that Name tag (%s)",
			where, aws.ToString(existing[0].InstanceId), instance(existing[0]).State)
	}

	tags := make([]types.Tag, 0, len(spec.Labels)+1)
	for _, k := range slices.Sorted(maps.Keys(spec.Labels)) {
		if k != NameTag {
			tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(spec.Labels[k])})
		}
	}
	tags = append(tags, types.Tag{Key: aws.String(NameTag), Value: aws.String(spec.Name)})
	tagSpecs := []types.TagSpecification{
		{ResourceType: types.ResourceTypeInstance, Tags: tags},
		{ResourceType: types.ResourceTypeVolume, Tags: tags},
	}

	nic := types.InstanceNetworkInterfaceSpecification{
		DeviceIndex:              aws.Int32(0),
		AssociatePublicIpAddress: aws.Bool(false),
		DeleteOnTermination:      aws.Bool(true),
		Groups:                   c.SecurityGroupIDs,
	}
	if subnet := c.Subnets[spec.Zone]; subnet != "" {
		nic.SubnetId = aws.String(subnet)
	}
	in := &ec2.RunInstancesInput{
		ImageId:           aws.String(spec.Image),
		InstanceType:      types.InstanceType(spec.MachineType),
		MinCount:          aws.Int32(1),
		MaxCount:          aws.Int32(1),
		NetworkInterfaces: []types.InstanceNetworkInterfaceSpecification{nic},
		MetadataOptions: &types.InstanceMetadataOptionsRequest{
			HttpEndpoint:            types.InstanceMetadataEndpointStateEnabled,
			HttpTokens:              types.HttpTokensStateRequired,
			HttpPutResponseHopLimit: aws.Int32(2), // containers on the VM reach IMDS too
			InstanceMetadataTags:    types.InstanceMetadataTagsStateEnabled,
		},
	}
	if spec.Zone != "" {
		in.Placement = &types.Placement{AvailabilityZone: aws.String(spec.Zone)}
	}
	if ud, ok := spec.Metadata[UserDataKey]; ok && ud != "" {
		in.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte(ud)))
	}
	if c.InstanceProfile != "" {
		if strings.HasPrefix(c.InstanceProfile, "arn:") {
			in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Arn: aws.String(c.InstanceProfile)}
		} else {
			in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: aws.String(c.InstanceProfile)}
		}
	}
	if spec.Spot {
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{
			MarketType: types.MarketTypeSpot,
			SpotOptions: &types.SpotMarketOptions{
				SpotInstanceType:             types.SpotInstanceTypeOneTime,
				InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate,
			},
		}
		tagSpecs = append(tagSpecs, types.TagSpecification{ResourceType: types.ResourceTypeSpotInstancesRequest, Tags: tags})
	}
	in.TagSpecifications = tagSpecs

	// RunInstances' ClientToken is filled in by the SDK once per call, so its
	// own retries (throttling, 5xx) cannot launch a second instance.
	out, err := c.client.RunInstances(ctx, in)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("aws: create instance %s: %w", where, err)
	}
	if len(out.Instances) != 1 {
		return providers.Instance{}, fmt.Errorf("aws: create instance %s: RunInstances returned %d instances", where, len(out.Instances))
	}
	id := aws.ToString(out.Instances[0].InstanceId)

	w := ec2.NewInstanceRunningWaiter(c.client, func(o *ec2.InstanceRunningWaiterOptions) {
		o.MinDelay, o.MaxDelay = c.WaitMinDelay, c.WaitMaxDelay
	})
	res, err := w.WaitForOutput(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}, c.CreateTimeout)
	if err != nil {
		return providers.Instance{}, fmt.Errorf("aws: create instance %s: %s did not reach running: %w", where, id, err)
	}
	for _, r := range res.Reservations {
		for _, i := range r.Instances {
			if aws.ToString(i.InstanceId) == id {
				return instance(i), nil
			}
		}
	}
	return instance(out.Instances[0]), nil
}

// DeleteInstance terminates the live instances called name in zone and
// waits, with the SDK's InstanceTerminatedWaiter bounded by DeleteTimeout,
// until they are terminated. No such instance is not an error.
func (c *Compute) DeleteInstance(ctx context.Context, zone, name string) error {
	ins, err := c.byName(ctx, zone, name)
	if err != nil {
		return fmt.Errorf("aws: delete instance %s in %s: %w", name, zone, err)
	}
	if len(ins) == 0 {
		return nil
	}
	ids := make([]string, 0, len(ins))
	for _, in := range ins {
		ids = append(ids, aws.ToString(in.InstanceId))
	}
	if _, err := c.client.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids}); err != nil {
		if isCode(err, "InvalidInstanceID.NotFound") {
			return nil // gone meanwhile
		}
		return fmt.Errorf("aws: delete instance %s (%s) in %s: %w", name, strings.Join(ids, ", "), zone, err)
	}
	w := ec2.NewInstanceTerminatedWaiter(c.client, func(o *ec2.InstanceTerminatedWaiterOptions) {
		o.MinDelay, o.MaxDelay = c.WaitMinDelay, c.WaitMaxDelay
	})
	if err := w.Wait(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids}, c.DeleteTimeout); err != nil && !isCode(err, "InvalidInstanceID.NotFound") {
		return fmt.Errorf("aws: delete instance %s (%s) in %s: waiting for terminated: %w", name, strings.Join(ids, ", "), zone, err)
	}
	return nil
}

// RequestDrain tags the instance runnerfleet:drain=true.
func (c *Compute) RequestDrain(ctx context.Context, zone, name string) error {
	in, err := c.one(ctx, zone, name)
	if err != nil {
		return fmt.Errorf("aws: request drain of %s in %s: %w", name, zone, err)
	}
	id := aws.ToString(in.InstanceId)
	_, err = c.client.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: []string{id},
		Tags:      []types.Tag{{Key: aws.String(providers.EC2DrainTag), Value: aws.String("true")}},
	})
	if err != nil {
		if isCode(err, "InvalidInstanceID.NotFound") {
			err = fmt.Errorf("%w: %w", err, providers.ErrNotFound)
		}
		return fmt.Errorf("aws: request drain of %s (%s) in %s: %w", name, id, zone, err)
	}
	return nil
}

// DrainState reads the runnerfleet:drain-* tags the instance's agent wrote.
func (c *Compute) DrainState(ctx context.Context, zone, name string) (providers.DrainState, error) {
	in, err := c.one(ctx, zone, name)
	if err != nil {
		return providers.DrainState{}, fmt.Errorf("aws: drain state of %s in %s: %w", name, zone, err)
	}
	s, err := parseDrainState(tagMap(in.Tags))
	if err != nil {
		return providers.DrainState{}, fmt.Errorf("aws: drain state of %s (%s) in %s: %w", name, aws.ToString(in.InstanceId), zone, err)
	}
	return s, nil
}

func parseDrainState(t map[string]string) (providers.DrainState, error) {
	s := providers.DrainState{Phase: providers.DrainPhase(t[providers.EC2PhaseTag])}
	if v := t[providers.EC2JobsLeftTag]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return s, fmt.Errorf("tag %s=%q: %w", providers.EC2JobsLeftTag, v, err)
		}
		s.JobsLeft = n
	}
	if v := t[providers.EC2UpdatedAtTag]; v != "" {
		ts, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return s, fmt.Errorf("tag %s=%q: %w", providers.EC2UpdatedAtTag, v, err)
		}
		s.UpdatedAt = ts
	}
	return s, nil
}

// ListImages lists the account's own images tagged family=family, newest
// first (by CreationDate).
func (c *Compute) ListImages(ctx context.Context, family string) ([]providers.Image, error) {
	ims, err := c.images(ctx, types.Filter{Name: aws.String("tag:" + FamilyTag), Values: []string{escapeFilter(family)}})
	if err != nil {
		return nil, fmt.Errorf("aws: list images of family %s: %w", family, err)
	}
	out := make([]providers.Image, 0, len(ims))
	for _, im := range ims {
		t := tagMap(im.Tags)
		created, _ := time.Parse(time.RFC3339Nano, aws.ToString(im.CreationDate))
		out = append(out, providers.Image{
			ID:        aws.ToString(im.ImageId),
			Name:      aws.ToString(im.Name),
			Family:    t[FamilyTag],
			Labels:    t,
			CreatedAt: created,
		})
	}
	slices.SortStableFunc(out, func(a, b providers.Image) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return out, nil
}

// ImageExists describes the AMI (any owner the account may launch from).
func (c *Compute) ImageExists(ctx context.Context, ami string) error {
	out, err := c.client.DescribeImages(ctx, &ec2.DescribeImagesInput{
		Filters: []types.Filter{{Name: aws.String("image-id"), Values: []string{escapeFilter(ami)}}},
	})
	switch {
	case isCode(err, "InvalidAMIID.NotFound", "InvalidAMIID.Malformed"):
		return fmt.Errorf("aws: image %s: %w: %w", ami, providers.ErrNotFound, err)
	case err != nil:
		return fmt.Errorf("aws: image %s: %w", ami, err)
	case len(out.Images) == 0:
		return fmt.Errorf("aws: image %s: %w", ami, providers.ErrNotFound)
	}
	return nil
}

func (c *Compute) images(ctx context.Context, f types.Filter) ([]types.Image, error) {
	var out []types.Image
	p := ec2.NewDescribeImagesPaginator(c.client, &ec2.DescribeImagesInput{
		Owners:     []string{"self"},
		Filters:    []types.Filter{f},
		MaxResults: aws.Int32(1000),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Images...)
	}
	return out, nil
}

// DeleteImage deregisters the account's own image called name and deletes
// its EBS snapshots. No such image is not an error.
func (c *Compute) DeleteImage(ctx context.Context, name string) error {
	ims, err := c.images(ctx, types.Filter{Name: aws.String("name"), Values: []string{escapeFilter(name)}})
	if err != nil {
		return fmt.Errorf("aws: delete image %s: %w", name, err)
	}
	for _, im := range ims {
		id := aws.ToString(im.ImageId)
		_, err := c.client.DeregisterImage(ctx, &ec2.DeregisterImageInput{ImageId: im.ImageId})
		if err != nil && !isCode(err, "InvalidAMIID.NotFound", "InvalidAMIID.Unavailable") {
			return fmt.Errorf("aws: delete image %s (%s): %w", name, id, err)
		}
		for _, bdm := range im.BlockDeviceMappings {
			if bdm.Ebs == nil || aws.ToString(bdm.Ebs.SnapshotId) == "" {
				continue
			}
			_, err := c.client.DeleteSnapshot(ctx, &ec2.DeleteSnapshotInput{SnapshotId: bdm.Ebs.SnapshotId})
			if err != nil && !isCode(err, "InvalidSnapshot.NotFound") {
				return fmt.Errorf("aws: delete image %s (%s): snapshot %s: %w", name, id, aws.ToString(bdm.Ebs.SnapshotId), err)
			}
		}
	}
	return nil
}

// ListOrphanSpotRequests lists the region's open or active spot instance
// requests that have no instance, or whose instance is not pending or
// running. It looks at every request of the account, not only runnerfleet's.
func (c *Compute) ListOrphanSpotRequests(ctx context.Context) ([]string, error) {
	var reqs []types.SpotInstanceRequest
	p := ec2.NewDescribeSpotInstanceRequestsPaginator(c.client, &ec2.DescribeSpotInstanceRequestsInput{
		Filters:    []types.Filter{{Name: aws.String("state"), Values: []string{"open", "active"}}},
		MaxResults: aws.Int32(1000),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("aws: list spot requests: %w", err)
		}
		reqs = append(reqs, page.SpotInstanceRequests...)
	}

	var ids []string
	for _, r := range reqs {
		if id := aws.ToString(r.InstanceId); id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	alive := map[string]bool{}
	// An instance-id filter, unlike InstanceIds, does not fail the whole
	// call when one instance is long gone. EC2 takes up to 200 values a
	// filter.
	for chunk := range slices.Chunk(ids, 200) {
		ins, err := c.describe(ctx, []types.Filter{{Name: aws.String("instance-id"), Values: chunk}})
		if err != nil {
			return nil, fmt.Errorf("aws: list spot requests: their instances: %w", err)
		}
		for _, in := range ins {
			if in.State != nil && (in.State.Name == types.InstanceStateNameRunning || in.State.Name == types.InstanceStateNamePending) {
				alive[aws.ToString(in.InstanceId)] = true
			}
		}
	}
	var orphans []string
	for _, r := range reqs {
		if !alive[aws.ToString(r.InstanceId)] {
			orphans = append(orphans, aws.ToString(r.SpotInstanceRequestId))
		}
	}
	return orphans, nil
}

// CancelSpotRequests cancels spot instance requests (their instances, if
// any, keep running).
func (c *Compute) CancelSpotRequests(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := c.client.CancelSpotInstanceRequests(ctx, &ec2.CancelSpotInstanceRequestsInput{SpotInstanceRequestIds: ids})
	if err != nil {
		if isCode(err, "InvalidSpotInstanceRequestID.NotFound") {
			err = fmt.Errorf("%w: %w", err, providers.ErrNotFound)
		}
		return fmt.Errorf("aws: cancel spot requests %s: %w", strings.Join(ids, ", "), err)
	}
	return nil
}

// Note tags the instance runnerfleet:note-<key>=value, or removes the tag
// when value is empty.
func (c *Compute) Note(ctx context.Context, zone, name, key, value string) error {
	in, err := c.one(ctx, zone, name)
	if err != nil {
		return fmt.Errorf("aws: note %s on %s in %s: %w", key, name, zone, err)
	}
	id := aws.ToString(in.InstanceId)
	tag := types.Tag{Key: aws.String(providers.EC2NotePrefix + key), Value: aws.String(value)}
	if value == "" {
		_, err = c.client.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: []types.Tag{{Key: tag.Key}}})
	} else {
		_, err = c.client.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{tag}})
	}
	if err != nil {
		if isCode(err, "InvalidInstanceID.NotFound") {
			err = fmt.Errorf("%w: %w", err, providers.ErrNotFound)
		}
		return fmt.Errorf("aws: note %s on %s (%s) in %s: %w", key, name, id, zone, err)
	}
	return nil
}

// JobReport reads the runnerfleet:jobs* tags a job reporter wrote.
func (c *Compute) JobReport(ctx context.Context, zone, name string) (providers.JobReport, error) {
	in, err := c.one(ctx, zone, name)
	if err != nil {
		return providers.JobReport{}, fmt.Errorf("aws: job report of %s in %s: %w", name, zone, err)
	}
	return parseJobReport(tagMap(in.Tags))
}

func parseJobReport(t map[string]string) (providers.JobReport, error) {
	n, at := t[providers.EC2JobsTag], t[providers.EC2JobsUpdatedAtTag]
	if n == "" || at == "" {
		return providers.JobReport{}, nil
	}
	jobs, err := strconv.Atoi(n)
	if err != nil || jobs < 0 {
		return providers.JobReport{}, fmt.Errorf("tag %s=%q is not a job count", providers.EC2JobsTag, n)
	}
	ts, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return providers.JobReport{}, fmt.Errorf("tag %s=%q: %w", providers.EC2JobsUpdatedAtTag, at, err)
	}
	return providers.JobReport{Found: true, Jobs: jobs, UpdatedAt: ts}, nil
}

// instance converts an EC2 instance.
func instance(in types.Instance) providers.Instance {
	t := tagMap(in.Tags)
	out := providers.Instance{
		Name:      t[NameTag],
		ID:        aws.ToString(in.InstanceId),
		Image:     aws.ToString(in.ImageId),
		Labels:    t,
		Address:   aws.ToString(in.PrivateIpAddress),
		ManagedBy: t["aws:autoscaling:groupName"],
	}
	for k, v := range t {
		if key, ok := strings.CutPrefix(k, providers.EC2NotePrefix); ok {
			if out.Notes == nil {
				out.Notes = map[string]string{}
			}
			out.Notes[key] = v
		}
	}
	if in.Placement != nil {
		out.Zone = aws.ToString(in.Placement.AvailabilityZone)
	}
	if in.LaunchTime != nil {
		out.CreatedAt = *in.LaunchTime
	}
	if in.State != nil {
		out.State = state(in.State.Name)
	}
	return out
}

func state(s types.InstanceStateName) providers.State {
	switch s {
	case types.InstanceStateNamePending:
		return providers.StateProvisioning
	case types.InstanceStateNameRunning:
		return providers.StateRunning
	case types.InstanceStateNameStopping, types.InstanceStateNameShuttingDown:
		return providers.StateStopping
	case types.InstanceStateNameStopped:
		return providers.StateStopped
	case types.InstanceStateNameTerminated:
		return providers.StateTerminated
	}
	return providers.State(s)
}

func tagMap(tags []types.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

// escapeFilter escapes EC2 filter wildcards (* and ?) so v matches itself.
func escapeFilter(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`)
	return r.Replace(v)
}

// isCode reports whether err is an EC2 API error with one of codes.
func isCode(err error, codes ...string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && slices.Contains(codes, ae.ErrorCode())
}
