package ec2test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// All handlers run with s.mu held and states advanced.

func (s *Server) instanceNotFound(ids ...string) *apiError {
	if len(ids) == 1 {
		return errf(http.StatusBadRequest, "InvalidInstanceID.NotFound",
			"The instance ID '%s' does not exist", ids[0])
	}
	return errf(http.StatusBadRequest, "InvalidInstanceID.NotFound",
		"The instance IDs '%s' do not exist", strings.Join(ids, ", "))
}

func checkInstanceIDs(ids []string) *apiError {
	for _, id := range ids {
		if !strings.HasPrefix(id, "i-") || len(id) < 10 {
			return errf(http.StatusBadRequest, "InvalidInstanceID.Malformed",
				"Invalid id: \"%s\"", id)
		}
	}
	return nil
}

func (s *Server) matchInstance(in *Instance, fs []filter) (bool, *apiError) {
	for _, fl := range fs {
		if ok, handled := matchTags(fl, in.Tags); handled {
			if !ok {
				return false, nil
			}
			continue
		}
		var v string
		switch fl.name {
		case "instance-state-name":
			v = in.State
		case "instance-state-code":
			v = strconv.Itoa(stateCodes[in.State])
		case "instance-id":
			v = in.ID
		case "availability-zone":
			v = in.Zone
		case "image-id":
			v = in.ImageID
		case "instance-type":
			v = in.InstanceType
		case "instance-lifecycle":
			if !in.Spot {
				return false, nil
			}
			v = "spot"
		case "spot-instance-request-id":
			v = in.SpotRequestID
		case "subnet-id":
			v = in.SubnetID
		case "reservation-id":
			v = in.ReservationID
		default:
			return false, invalidFilter(fl.name)
		}
		if !matchAny(fl.values, v) {
			return false, nil
		}
	}
	return true, nil
}

var (
	instanceFilters = []string{"instance-state-name", "instance-state-code", "instance-id", "availability-zone",
		"image-id", "instance-type", "instance-lifecycle", "spot-instance-request-id", "subnet-id", "reservation-id"}
	imageFilters = []string{"name", "image-id", "state", "owner-id"}
	spotFilters  = []string{"state", "instance-id", "spot-instance-request-id", "type", "status-code"}
)

// checkFilters refuses filter names outside known (tag:<key> and tag-key
// are always known), as EC2 does even when nothing would match.
func checkFilters(fs []filter, known []string) *apiError {
	for _, fl := range fs {
		if !strings.HasPrefix(fl.name, "tag:") && fl.name != "tag-key" && !slices.Contains(known, fl.name) {
			return invalidFilter(fl.name)
		}
		if len(fl.values) == 0 {
			return invalidParam("The filter '%s' has no values", fl.name)
		}
	}
	return nil
}

func (s *Server) describeInstances(f url.Values, requestID string) (any, *apiError) {
	ids := list(f, "InstanceId")
	if len(ids) > 0 && f.Get("MaxResults") != "" {
		return nil, errf(http.StatusBadRequest, "InvalidParameterCombination",
			"The parameter instancesSet cannot be used with the parameter maxResults")
	}
	if e := checkInstanceIDs(ids); e != nil {
		return nil, e
	}
	var missing []string
	for _, id := range ids {
		if _, ok := s.instances[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nil, s.instanceNotFound(missing...)
	}
	fs := filters(f)
	if e := checkFilters(fs, instanceFilters); e != nil {
		return nil, e
	}
	var matched []*Instance
	for _, id := range s.order {
		in := s.instances[id]
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		ok, e := s.matchInstance(in, fs)
		if e != nil {
			return nil, e
		}
		if ok {
			matched = append(matched, in)
		}
	}
	start, end, next, e := s.page(f, len(matched))
	if e != nil {
		return nil, e
	}
	resp := &describeInstancesResponse{Xmlns: Namespace, RequestID: requestID, NextToken: next}
	for _, in := range matched[start:end] {
		n := len(resp.Reservations)
		if n > 0 && resp.Reservations[n-1].ReservationID == in.ReservationID {
			resp.Reservations[n-1].Instances = append(resp.Reservations[n-1].Instances, s.xmlInstance(in))
			continue
		}
		resp.Reservations = append(resp.Reservations, xmlReservation{
			ReservationID: in.ReservationID, OwnerID: s.account,
			Instances: []xmlInstance{s.xmlInstance(in)},
		})
	}
	return resp, nil
}

// imdsTagKeyOK is the restriction EC2 puts on tag keys of instances that
// expose their tags in instance metadata.
func imdsTagKeyOK(k string) bool {
	if k == "." || k == ".." || k == "_index" || k == "" {
		return false
	}
	for _, r := range k {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("+-=._:@,", r):
		default:
			return false
		}
	}
	return true
}

func checkTag(k, v string) *apiError {
	switch {
	case k == "":
		return invalidParam("Tag key must not be empty")
	case len(k) > 128:
		return invalidParam("Tag key exceeds the maximum length of 128 characters")
	case len(v) > 256:
		return invalidParam("Tag value exceeds the maximum length of 256 characters")
	case strings.HasPrefix(strings.ToLower(k), "aws:"):
		return invalidParam("Tag keys starting with 'aws:' are reserved for internal use")
	}
	return nil
}

func (s *Server) runInstances(f url.Values, requestID string) (any, *apiError) {
	imageID := f.Get("ImageId")
	if imageID == "" {
		return nil, missingParam("ImageId")
	}
	minCount, err1 := strconv.Atoi(f.Get("MinCount"))
	maxCount, err2 := strconv.Atoi(f.Get("MaxCount"))
	if err1 != nil || err2 != nil || minCount < 1 || maxCount < minCount {
		return nil, invalidParam("MinCount and MaxCount must be positive, MinCount <= MaxCount")
	}
	if _, ok := s.images[imageID]; !ok {
		return nil, errf(http.StatusBadRequest, "InvalidAMIID.NotFound",
			"The image id '[%s]' does not exist", imageID)
	}
	// Idempotency: a client token seen before returns the same reservation.
	token := f.Get("ClientToken")
	if rid, ok := s.clientTokens[token]; ok && token != "" {
		resp := &runInstancesResponse{Xmlns: Namespace, RequestID: requestID, ReservationID: rid, OwnerID: s.account}
		for _, id := range s.order {
			if in := s.instances[id]; in.ReservationID == rid {
				resp.Instances = append(resp.Instances, s.xmlInstance(in))
			}
		}
		return resp, nil
	}

	zone := f.Get("Placement.AvailabilityZone")
	if zone == "" {
		zone = s.region + "a"
	}
	if regionOf(zone) != s.region {
		return nil, invalidParam("Invalid availability zone: [%s]", zone)
	}
	instanceType := f.Get("InstanceType")
	if instanceType == "" {
		instanceType = "m1.small"
	}

	in := Instance{ImageID: imageID, InstanceType: instanceType, Zone: zone, ClientToken: token,
		SubnetID: f.Get("SubnetId"), SecurityGroupIDs: list(f, "SecurityGroupId")}
	associatePublic := true
	if count(f, "NetworkInterface") > 0 {
		if in.SubnetID != "" || len(in.SecurityGroupIDs) > 0 {
			return nil, errf(http.StatusBadRequest, "InvalidParameterCombination",
				"Network interfaces and an instance-level subnet ID or security groups may not be specified on the same request")
		}
		if count(f, "NetworkInterface") > 1 {
			return nil, invalidParam("the fake supports one network interface")
		}
		const p = "NetworkInterface.1."
		if f.Get(p+"DeviceIndex") != "0" {
			return nil, invalidParam("Each network interface requires a device index.")
		}
		if v := f.Get(p + "AssociatePublicIpAddress"); v == "false" {
			associatePublic = false
		}
		in.SubnetID = f.Get(p + "SubnetId")
		in.SecurityGroupIDs = list(f, p+"SecurityGroupId")
	}
	if in.SubnetID == "" {
		in.SubnetID = "subnet-default-" + zone
	}

	if ud := f.Get("UserData"); ud != "" {
		raw, err := base64.StdEncoding.DecodeString(ud)
		if err != nil {
			return nil, invalidParam("Invalid BASE64 encoding of user data.")
		}
		if len(raw) > 16384 {
			return nil, invalidParam("User data is limited to 16384 bytes")
		}
		in.UserData = string(raw)
	}

	in.HTTPTokens = f.Get("MetadataOptions.HttpTokens")
	if in.HTTPTokens == "" {
		in.HTTPTokens = "required"
	}
	in.MetadataTags = f.Get("MetadataOptions.InstanceMetadataTags") == "enabled"
	in.HopLimit, _ = strconv.Atoi(f.Get("MetadataOptions.HttpPutResponseHopLimit"))
	in.InstanceProfile = f.Get("IamInstanceProfile.Name")
	if arn := f.Get("IamInstanceProfile.Arn"); arn != "" {
		in.InstanceProfile = arn
	}

	spotType := ""
	switch mt := f.Get("InstanceMarketOptions.MarketType"); mt {
	case "":
	case "spot":
		in.Spot = true
		spotType = f.Get("InstanceMarketOptions.SpotOptions.SpotInstanceType")
		if spotType == "" {
			spotType = "one-time"
		}
		b := f.Get("InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior")
		if spotType == "one-time" && b != "" && b != "terminate" {
			return nil, invalidParam("Only terminate is a valid interruption behavior for one-time spot requests")
		}
	default:
		return nil, invalidParam("Invalid market type: %s", mt)
	}

	instanceTags, volumeTags, spotTags := map[string]string{}, map[string]string{}, map[string]string{}
	for i := 1; i <= count(f, "TagSpecification"); i++ {
		p := "TagSpecification." + strconv.Itoa(i)
		keys, t := tags(f, p+".Tag")
		for _, k := range keys {
			if e := checkTag(k, t[k]); e != nil {
				return nil, e
			}
		}
		var dst map[string]string
		switch rt := f.Get(p + ".ResourceType"); rt {
		case "instance":
			dst = instanceTags
		case "volume":
			dst = volumeTags
		case "spot-instances-request":
			if !in.Spot {
				return nil, invalidParam("spot-instances-request tags need InstanceMarketOptions with MarketType spot")
			}
			dst = spotTags
		case "network-interface":
			dst = map[string]string{}
		default:
			return nil, invalidParam("'%s' is not a valid taggable resource type for this operation.", rt)
		}
		for k, v := range t {
			dst[k] = v
		}
	}
	if in.MetadataTags {
		for k := range instanceTags {
			if !imdsTagKeyOK(k) {
				return nil, invalidParam("The tag key '%s' is not allowed when instance metadata tags are enabled", k)
			}
		}
	}
	if len(instanceTags) > 50 || len(volumeTags) > 50 {
		return nil, errf(http.StatusBadRequest, "TagLimitExceeded", "The maximum number of tags per resource is 50")
	}

	rid := s.newID("r-", 17)
	if token != "" {
		s.clientTokens[token] = rid
	}
	resp := &runInstancesResponse{Xmlns: Namespace, RequestID: requestID, ReservationID: rid, OwnerID: s.account}
	now := s.now()
	for range maxCount {
		c := in
		c.ID = s.newID("i-", 17)
		c.ReservationID = rid
		c.State = StatePending
		c.LaunchTime = now
		c.stateSince = now
		c.PrivateIP = s.newPrivateIP()
		if associatePublic {
			c.PublicIP = "203.0.113." + strconv.Itoa(s.seq%250+1)
		}
		c.Tags = cloneMap(instanceTags)
		c.VolumeTags = cloneMap(volumeTags)
		c.SecurityGroupIDs = slices.Clone(in.SecurityGroupIDs)
		if c.Spot {
			r := &SpotRequest{ID: s.newID("sir-", 8), State: "active", StatusCode: "fulfilled",
				Type: spotType, InstanceID: c.ID, Zone: zone, Tags: cloneMap(spotTags), CreateTime: now}
			s.spots[r.ID] = r
			c.SpotRequestID = r.ID
		}
		s.instances[c.ID] = &c
		s.order = append(s.order, c.ID)
		resp.Instances = append(resp.Instances, s.xmlInstance(&c))
	}
	return resp, nil
}

func cloneMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (s *Server) terminateInstances(f url.Values, requestID string) (any, *apiError) {
	ids := list(f, "InstanceId")
	if len(ids) == 0 {
		return nil, missingParam("InstanceId")
	}
	if e := checkInstanceIDs(ids); e != nil {
		return nil, e
	}
	var missing []string
	for _, id := range ids {
		if _, ok := s.instances[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nil, s.instanceNotFound(missing...)
	}
	resp := &terminateInstancesResponse{Xmlns: Namespace, RequestID: requestID}
	now := s.now()
	for _, id := range ids {
		in := s.instances[id]
		prev := in.State
		if prev != StateTerminated && prev != StateShuttingDown {
			in.State, in.stateSince = StateShuttingDown, now
		}
		resp.Instances = append(resp.Instances, xmlStateChange{
			InstanceID: id, CurrentState: state(in.State), PreviousState: state(prev),
		})
	}
	s.advance() // a zero terminate latency terminates at once
	return resp, nil
}

// taggable returns the tag map of a resource, by ID.
func (s *Server) taggable(id string) (map[string]string, *Instance, *apiError) {
	switch {
	case strings.HasPrefix(id, "i-"):
		in, ok := s.instances[id]
		if !ok {
			return nil, nil, s.instanceNotFound(id)
		}
		if in.Tags == nil {
			in.Tags = map[string]string{}
		}
		return in.Tags, in, nil
	case strings.HasPrefix(id, "ami-"):
		im, ok := s.images[id]
		if !ok {
			return nil, nil, errf(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
		}
		if im.Tags == nil {
			im.Tags = map[string]string{}
		}
		return im.Tags, nil, nil
	case strings.HasPrefix(id, "sir-"):
		r, ok := s.spots[id]
		if !ok {
			return nil, nil, errf(http.StatusBadRequest, "InvalidSpotInstanceRequestID.NotFound",
				"The spot instance request ID '%s' does not exist", id)
		}
		if r.Tags == nil {
			r.Tags = map[string]string{}
		}
		return r.Tags, nil, nil
	}
	return nil, nil, errf(http.StatusBadRequest, "InvalidID", "The ID '%s' is not valid", id)
}

func (s *Server) createTags(f url.Values, requestID string) (any, *apiError) {
	ids := list(f, "ResourceId")
	if len(ids) == 0 {
		return nil, missingParam("ResourceId")
	}
	keys, t := tags(f, "Tag")
	if len(keys) == 0 {
		return nil, missingParam("Tag")
	}
	for _, k := range keys {
		if e := checkTag(k, t[k]); e != nil {
			return nil, e
		}
	}
	// Validate everything before changing anything.
	for _, id := range ids {
		dst, in, e := s.taggable(id)
		if e != nil {
			return nil, e
		}
		n := len(dst)
		for _, k := range keys {
			if _, ok := dst[k]; !ok {
				n++
			}
			if in != nil && in.MetadataTags && !imdsTagKeyOK(k) {
				return nil, invalidParam("The tag key '%s' is not allowed on %s: instance metadata tags are enabled", k, id)
			}
		}
		if n > 50 {
			return nil, errf(http.StatusBadRequest, "TagLimitExceeded", "The maximum number of tags per resource is 50")
		}
	}
	for _, id := range ids {
		dst, _, _ := s.taggable(id)
		for _, k := range keys {
			dst[k] = t[k]
		}
	}
	return okResponse("CreateTags", requestID), nil
}

func (s *Server) deleteTags(f url.Values, requestID string) (any, *apiError) {
	ids := list(f, "ResourceId")
	if len(ids) == 0 {
		return nil, missingParam("ResourceId")
	}
	n := count(f, "Tag")
	for _, id := range ids {
		if _, _, e := s.taggable(id); e != nil {
			return nil, e
		}
	}
	for _, id := range ids {
		dst, _, _ := s.taggable(id)
		if n == 0 { // no Tag parameter: delete every tag
			for k := range dst {
				delete(dst, k)
			}
			continue
		}
		for i := 1; i <= n; i++ {
			p := "Tag." + strconv.Itoa(i)
			k := f.Get(p + ".Key")
			if v, has := f[p+".Value"]; has && dst[k] != v[0] {
				continue // a value given must match
			}
			delete(dst, k)
		}
	}
	return okResponse("DeleteTags", requestID), nil
}

func (s *Server) matchImage(im *Image, fs []filter) (bool, *apiError) {
	for _, fl := range fs {
		if ok, handled := matchTags(fl, im.Tags); handled {
			if !ok {
				return false, nil
			}
			continue
		}
		var v string
		switch fl.name {
		case "name":
			v = im.Name
		case "image-id":
			v = im.ID
		case "state":
			v = im.State
		case "owner-id":
			v = im.OwnerID
		default:
			return false, invalidFilter(fl.name)
		}
		if !matchAny(fl.values, v) {
			return false, nil
		}
	}
	return true, nil
}

func (s *Server) describeImages(f url.Values, requestID string) (any, *apiError) {
	ids := list(f, "ImageId")
	for _, id := range ids {
		if _, ok := s.images[id]; !ok {
			return nil, errf(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
		}
	}
	owners := list(f, "Owner")
	for i, o := range owners {
		if o == "self" {
			owners[i] = s.account
		}
	}
	fs := filters(f)
	if e := checkFilters(fs, imageFilters); e != nil {
		return nil, e
	}
	var matched []*Image
	for _, im := range s.sortedImages() {
		if len(ids) > 0 && !slices.Contains(ids, im.ID) {
			continue
		}
		if len(owners) > 0 && !slices.Contains(owners, im.OwnerID) {
			continue
		}
		ok, e := s.matchImage(im, fs)
		if e != nil {
			return nil, e
		}
		if ok {
			matched = append(matched, im)
		}
	}
	start, end, next, e := s.page(f, len(matched))
	if e != nil {
		return nil, e
	}
	resp := &describeImagesResponse{Xmlns: Namespace, RequestID: requestID, NextToken: next}
	for _, im := range matched[start:end] {
		x := xmlImage{
			ImageID: im.ID, ImageLocation: im.OwnerID + "/" + im.Name, ImageState: im.State,
			ImageOwnerID: im.OwnerID, CreationDate: timestamp(im.CreationDate),
			Architecture: "x86_64", ImageType: "machine", Name: im.Name,
			RootDeviceType: "ebs", RootDeviceName: "/dev/xvda", VirtualizationTy: "hvm",
			Tags: tagSet(im.Tags),
		}
		for i, snap := range im.SnapshotIDs {
			x.BlockDevices = append(x.BlockDevices, xmlBlockDevice{
				DeviceName: "/dev/xvd" + string(rune('a'+i)),
				EBS:        xmlEBS{SnapshotID: snap, VolumeSize: 8, DeleteOnTermination: true, VolumeType: "gp3"},
			})
		}
		resp.Images = append(resp.Images, x)
	}
	return resp, nil
}

// sortedImages lists the images in a stable order (creation date, then ID).
// s.mu is held.
func (s *Server) sortedImages() []*Image {
	out := make([]*Image, 0, len(s.images))
	for _, im := range s.images {
		out = append(out, im)
	}
	slices.SortFunc(out, func(a, b *Image) int {
		if c := a.CreationDate.Compare(b.CreationDate); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

func (s *Server) deregisterImage(f url.Values, requestID string) (any, *apiError) {
	id := f.Get("ImageId")
	if id == "" {
		return nil, missingParam("ImageId")
	}
	im, ok := s.images[id]
	if !ok {
		return nil, errf(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
	}
	delete(s.images, id)
	resp := &deregisterImageResponse{Xmlns: Namespace, RequestID: requestID, Return: true}
	if f.Get("DeleteAssociatedSnapshots") == "true" {
		for _, snap := range im.SnapshotIDs {
			code := "success"
			if s.snapshotInUse(snap) != "" {
				code = "client-error"
			} else {
				delete(s.snapshots, snap)
			}
			resp.Deleted = append(resp.Deleted, xmlDeleteSnapshotResult{SnapshotID: snap, ReturnCode: code})
		}
	}
	return resp, nil
}

func (s *Server) snapshotInUse(snap string) string {
	for _, im := range s.sortedImages() {
		if slices.Contains(im.SnapshotIDs, snap) {
			return im.ID
		}
	}
	return ""
}

func (s *Server) deleteSnapshot(f url.Values, requestID string) (any, *apiError) {
	id := f.Get("SnapshotId")
	if id == "" {
		return nil, missingParam("SnapshotId")
	}
	if !s.snapshots[id] {
		return nil, errf(http.StatusBadRequest, "InvalidSnapshot.NotFound", "The snapshot '%s' does not exist.", id)
	}
	if ami := s.snapshotInUse(id); ami != "" {
		return nil, errf(http.StatusBadRequest, "InvalidSnapshot.InUse",
			"The snapshot %s is currently in use by %s", id, ami)
	}
	delete(s.snapshots, id)
	return okResponse("DeleteSnapshot", requestID), nil
}

func (s *Server) describeSpotInstanceRequests(f url.Values, requestID string) (any, *apiError) {
	ids := list(f, "SpotInstanceRequestId")
	for _, id := range ids {
		if _, ok := s.spots[id]; !ok {
			return nil, errf(http.StatusBadRequest, "InvalidSpotInstanceRequestID.NotFound",
				"The spot instance request ID '%s' does not exist", id)
		}
	}
	fs := filters(f)
	if e := checkFilters(fs, spotFilters); e != nil {
		return nil, e
	}
	var matched []*SpotRequest
	keys := make([]string, 0, len(s.spots))
	for k := range s.spots {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		r := s.spots[k]
		if len(ids) > 0 && !slices.Contains(ids, r.ID) {
			continue
		}
		keep := true
		for _, fl := range fs {
			if ok, handled := matchTags(fl, r.Tags); handled {
				keep = keep && ok
				continue
			}
			var v string
			switch fl.name {
			case "state":
				v = r.State
			case "instance-id":
				v = r.InstanceID
			case "spot-instance-request-id":
				v = r.ID
			case "type":
				v = r.Type
			case "status-code":
				v = r.StatusCode
			default:
				return nil, invalidFilter(fl.name)
			}
			keep = keep && matchAny(fl.values, v)
		}
		if keep {
			matched = append(matched, r)
		}
	}
	start, end, next, e := s.page(f, len(matched))
	if e != nil {
		return nil, e
	}
	resp := &describeSpotInstanceRequestsResponse{Xmlns: Namespace, RequestID: requestID, NextToken: next}
	for _, r := range matched[start:end] {
		resp.Requests = append(resp.Requests, xmlSpotRequest{
			SpotInstanceRequestID: r.ID, SpotPrice: "0.100000", Type: r.Type, State: r.State,
			Status:     xmlSpotStatus{Code: r.StatusCode, UpdateTime: timestamp(r.CreateTime), Message: r.StatusCode},
			InstanceID: r.InstanceID, CreateTime: timestamp(r.CreateTime), ProductDescription: "Linux/UNIX",
			LaunchedAvailabilityZone: r.Zone, InstanceInterruptionBehavior: "terminate", Tags: tagSet(r.Tags),
		})
	}
	return resp, nil
}

func (s *Server) cancelSpotInstanceRequests(f url.Values, requestID string) (any, *apiError) {
	ids := list(f, "SpotInstanceRequestId")
	if len(ids) == 0 {
		return nil, missingParam("SpotInstanceRequestId")
	}
	for _, id := range ids {
		if _, ok := s.spots[id]; !ok {
			return nil, errf(http.StatusBadRequest, "InvalidSpotInstanceRequestID.NotFound",
				"The spot instance request ID '%s' does not exist", id)
		}
	}
	resp := &cancelSpotInstanceRequestsResponse{Xmlns: Namespace, RequestID: requestID}
	for _, id := range ids {
		r := s.spots[id]
		switch r.State {
		case "open", "active", "disabled":
			r.State = "cancelled"
			if r.InstanceID != "" {
				r.StatusCode = "request-canceled-and-instance-running"
			} else {
				r.StatusCode = "canceled-before-fulfillment"
			}
		}
		resp.Requests = append(resp.Requests, xmlCancelledSpotRequest{SpotInstanceRequestID: id, State: r.State})
	}
	return resp, nil
}
