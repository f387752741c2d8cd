package ec2test

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// apiError is an EC2 error response.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func invalidParam(format string, args ...any) *apiError {
	return errf(http.StatusBadRequest, "InvalidParameterValue", format, args...)
}

func missingParam(name string) *apiError {
	return errf(http.StatusBadRequest, "MissingParameter",
		"The request must contain the parameter %s", name)
}

var faultMessages = map[string]string{
	"RequestLimitExceeded":         "Request limit exceeded.",
	"InsufficientInstanceCapacity": "We currently do not have sufficient capacity in the Availability Zone you requested.",
	"InternalError":                "An internal error has occurred.",
	"Unavailable":                  "The server is overloaded and can't handle the request.",
}

type handler func(s *Server, f url.Values, requestID string) (any, *apiError)

var handlers = map[string]handler{
	"DescribeInstances":            (*Server).describeInstances,
	"RunInstances":                 (*Server).runInstances,
	"TerminateInstances":           (*Server).terminateInstances,
	"CreateTags":                   (*Server).createTags,
	"DeleteTags":                   (*Server).deleteTags,
	"DescribeImages":               (*Server).describeImages,
	"DeregisterImage":              (*Server).deregisterImage,
	"DeleteSnapshot":               (*Server).deleteSnapshot,
	"DescribeSpotInstanceRequests": (*Server).describeSpotInstanceRequests,
	"CancelSpotInstanceRequests":   (*Server).cancelSpotInstanceRequests,
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	requestID := fmt.Sprintf("%08x-0000-4000-8000-%012x", s.seq+1, s.seq+1)
	s.seq++
	s.mu.Unlock()

	if r.Method != http.MethodPost || r.URL.Path != "/" {
		writeError(w, requestID, errf(http.StatusBadRequest, "InvalidAction",
			"The fake EC2 endpoint takes form-encoded POSTs to /"))
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		writeError(w, requestID, errf(http.StatusUnauthorized, "AuthFailure",
			"AWS was not able to validate the provided access credentials"))
		return
	}
	if _, cred, ok := strings.Cut(r.Header.Get("Authorization"), "Credential="); ok {
		key, _, _ := strings.Cut(cred, "/")
		s.mu.Lock()
		if s.accessKeys == nil {
			s.accessKeys = map[string]int{}
		}
		s.accessKeys[key]++
		s.mu.Unlock()
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, requestID, errf(http.StatusBadRequest, "MalformedQueryString", "%v", err))
		return
	}
	f := r.PostForm
	action := f.Get("Action")

	s.mu.Lock()
	s.calls[action]++
	s.requests[action] = append(s.requests[action], cloneValues(f))
	delay := takeFault(s.delays, action)
	fail := takeFault(s.failures, action)
	s.mu.Unlock()

	if delay != nil {
		t := time.NewTimer(delay.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if fail != nil {
		msg := faultMessages[fail.code]
		if msg == "" {
			msg = "Injected fault " + fail.code + "."
		}
		writeError(w, requestID, &apiError{status: fail.status, code: fail.code, message: msg})
		return
	}
	h, ok := handlers[action]
	if !ok {
		writeError(w, requestID, errf(http.StatusBadRequest, "InvalidAction",
			"The action %s is not valid for this web service.", action))
		return
	}
	if v := f.Get("Version"); v != APIVersion {
		writeError(w, requestID, errf(http.StatusBadRequest, "NoSuchVersion",
			"An invalid or unsupported API version, %q, was specified.", v))
		return
	}
	if f.Get("DryRun") == "true" {
		writeError(w, requestID, errf(http.StatusPreconditionFailed, "DryRunOperation",
			"Request would have succeeded, but DryRun flag is set."))
		return
	}

	s.mu.Lock()
	s.advance()
	resp, aerr := h(s, f, requestID)
	s.mu.Unlock()
	if aerr != nil {
		writeError(w, requestID, aerr)
		return
	}
	body, err := xml.Marshal(resp)
	if err != nil {
		writeError(w, requestID, errf(http.StatusInternalServerError, "InternalError", "%v", err))
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("x-amzn-RequestId", requestID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(body)
}

type xmlError struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

type xmlErrorResponse struct {
	XMLName   xml.Name   `xml:"Response"`
	Errors    []xmlError `xml:"Errors>Error"`
	RequestID string     `xml:"RequestID"`
}

func writeError(w http.ResponseWriter, requestID string, e *apiError) {
	body, _ := xml.Marshal(xmlErrorResponse{
		Errors:    []xmlError{{Code: e.code, Message: e.message}},
		RequestID: requestID,
	})
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("x-amzn-RequestId", requestID)
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(body)
}

// ---- form decoding --------------------------------------------------------

// list returns the values of a flattened query list: prefix.1, prefix.2, …
func list(f url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		k := prefix + "." + strconv.Itoa(i)
		if _, ok := f[k]; !ok {
			return out
		}
		out = append(out, f.Get(k))
	}
}

// count returns how many members a flattened list of structures has,
// looking at prefix.N.<any>.
func count(f url.Values, prefix string) int {
	n := 0
	for k := range f {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		idx, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(idx); err == nil && i > n {
			n = i
		}
	}
	return n
}

type filter struct {
	name   string
	values []string
}

func filters(f url.Values) []filter {
	var out []filter
	for i := 1; i <= count(f, "Filter"); i++ {
		p := "Filter." + strconv.Itoa(i)
		out = append(out, filter{name: f.Get(p + ".Name"), values: list(f, p+".Value")})
	}
	return out
}

// tags decodes prefix.N.Key / prefix.N.Value.
func tags(f url.Values, prefix string) ([]string, map[string]string) {
	var keys []string
	m := map[string]string{}
	for i := 1; i <= count(f, prefix); i++ {
		p := prefix + "." + strconv.Itoa(i)
		k := f.Get(p + ".Key")
		keys = append(keys, k)
		m[k] = f.Get(p + ".Value")
	}
	return keys, m
}

// match reports whether v matches an EC2 filter value, where * and ? are
// wildcards and a backslash escapes the next character.
func match(pattern, v string) bool {
	p, s := []rune(pattern), []rune(v)
	var rec func(i, j int) bool
	rec = func(i, j int) bool {
		for i < len(p) {
			switch p[i] {
			case '*':
				for k := j; k <= len(s); k++ {
					if rec(i+1, k) {
						return true
					}
				}
				return false
			case '?':
				if j >= len(s) {
					return false
				}
			case '\\':
				if i+1 < len(p) {
					i++
				}
				if j >= len(s) || s[j] != p[i] {
					return false
				}
			default:
				if j >= len(s) || s[j] != p[i] {
					return false
				}
			}
			i++
			j++
		}
		return j == len(s)
	}
	return rec(0, 0)
}

func matchAny(patterns []string, v string) bool {
	for _, p := range patterns {
		if match(p, v) {
			return true
		}
	}
	return false
}

// matchTags applies the tag:<key> and tag-key filters.
func matchTags(fl filter, t map[string]string) (ok, handled bool) {
	if k, found := strings.CutPrefix(fl.name, "tag:"); found {
		v, has := t[k]
		return has && matchAny(fl.values, v), true
	}
	if fl.name == "tag-key" {
		for k := range t {
			if matchAny(fl.values, k) {
				return true, true
			}
		}
		return false, true
	}
	return false, false
}

func invalidFilter(name string) *apiError {
	return invalidParam("The filter '%s' is invalid", name)
}

// page cuts items into the requested page.
func (s *Server) page(f url.Values, n int) (start, end int, next string, e *apiError) {
	limit := 0
	if v := f.Get("MaxResults"); v != "" {
		m, err := strconv.Atoi(v)
		if err != nil || m < 5 || m > 1000 {
			return 0, 0, "", invalidParam("Value ( %s ) for parameter maxResults is invalid. Parameter may only be between 5 and 1000.", v)
		}
		limit = m
	}
	if s.pageLimit > 0 && (limit == 0 || s.pageLimit < limit) {
		limit = s.pageLimit
	}
	if tok := f.Get("NextToken"); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		off, err2 := strconv.Atoi(strings.TrimPrefix(string(raw), "offset:"))
		if err != nil || err2 != nil || !strings.HasPrefix(string(raw), "offset:") || off < 0 {
			return 0, 0, "", invalidParam("The token '%s' is invalid.", tok)
		}
		start = min(off, n)
	}
	end = n
	if limit > 0 && start+limit < n {
		end = start + limit
		next = base64.RawURLEncoding.EncodeToString([]byte("offset:" + strconv.Itoa(end)))
	}
	return start, end, next, nil
}

// ---- XML shapes -----------------------------------------------------------

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

func tagSet(t map[string]string) []xmlTag {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]xmlTag, 0, len(keys))
	for _, k := range keys {
		out = append(out, xmlTag{Key: k, Value: t[k]})
	}
	return out
}

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

func state(name string) xmlState { return xmlState{Code: stateCodes[name], Name: name} }

type xmlGroup struct {
	GroupID string `xml:"groupId"`
}

type xmlMetadataOptions struct {
	State                   string `xml:"state"`
	HTTPTokens              string `xml:"httpTokens"`
	HTTPPutResponseHopLimit int    `xml:"httpPutResponseHopLimit"`
	HTTPEndpoint            string `xml:"httpEndpoint"`
	InstanceMetadataTags    string `xml:"instanceMetadataTags"`
}

type xmlInstance struct {
	InstanceID            string             `xml:"instanceId"`
	ImageID               string             `xml:"imageId"`
	InstanceState         xmlState           `xml:"instanceState"`
	PrivateIPAddress      string             `xml:"privateIpAddress,omitempty"`
	IPAddress             string             `xml:"ipAddress,omitempty"`
	InstanceType          string             `xml:"instanceType"`
	LaunchTime            string             `xml:"launchTime"`
	AvailabilityZone      string             `xml:"placement>availabilityZone"`
	Tenancy               string             `xml:"placement>tenancy"`
	SubnetID              string             `xml:"subnetId,omitempty"`
	Groups                []xmlGroup         `xml:"groupSet>item"`
	InstanceLifecycle     string             `xml:"instanceLifecycle,omitempty"`
	SpotInstanceRequestID string             `xml:"spotInstanceRequestId,omitempty"`
	ClientToken           string             `xml:"clientToken,omitempty"`
	IAMInstanceProfileArn string             `xml:"iamInstanceProfile>arn,omitempty"`
	MetadataOptions       xmlMetadataOptions `xml:"metadataOptions"`
	Tags                  []xmlTag           `xml:"tagSet>item"`
}

func (s *Server) xmlInstance(in *Instance) xmlInstance {
	x := xmlInstance{
		InstanceID:            in.ID,
		ImageID:               in.ImageID,
		InstanceState:         state(in.State),
		PrivateIPAddress:      in.PrivateIP,
		IPAddress:             in.PublicIP,
		InstanceType:          in.InstanceType,
		LaunchTime:            in.LaunchTime.UTC().Format("2006-01-02T15:04:05.000Z"),
		AvailabilityZone:      in.Zone,
		Tenancy:               "default",
		SubnetID:              in.SubnetID,
		SpotInstanceRequestID: in.SpotRequestID,
		ClientToken:           in.ClientToken,
		Tags:                  tagSet(in.Tags),
		MetadataOptions: xmlMetadataOptions{
			State: "applied", HTTPTokens: in.HTTPTokens, HTTPPutResponseHopLimit: max(in.HopLimit, 1),
			HTTPEndpoint: "enabled", InstanceMetadataTags: "disabled",
		},
	}
	if in.MetadataTags {
		x.MetadataOptions.InstanceMetadataTags = "enabled"
	}
	if in.Spot {
		x.InstanceLifecycle = "spot"
	}
	if in.InstanceProfile != "" {
		arn := in.InstanceProfile
		if !strings.HasPrefix(arn, "arn:") {
			arn = "arn:aws:iam::" + s.account + ":instance-profile/" + arn
		}
		x.IAMInstanceProfileArn = arn
	}
	for _, g := range in.SecurityGroupIDs {
		x.Groups = append(x.Groups, xmlGroup{GroupID: g})
	}
	return x
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type runInstancesResponse struct {
	XMLName       xml.Name      `xml:"RunInstancesResponse"`
	Xmlns         string        `xml:"xmlns,attr"`
	RequestID     string        `xml:"requestId"`
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type xmlStateChange struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  xmlState `xml:"currentState"`
	PreviousState xmlState `xml:"previousState"`
}

type terminateInstancesResponse struct {
	XMLName   xml.Name         `xml:"TerminateInstancesResponse"`
	Xmlns     string           `xml:"xmlns,attr"`
	RequestID string           `xml:"requestId"`
	Instances []xmlStateChange `xml:"instancesSet>item"`
}

type returnResponse struct {
	XMLName   xml.Name
	Xmlns     string `xml:"xmlns,attr"`
	RequestID string `xml:"requestId"`
	Return    bool   `xml:"return"`
}

func okResponse(action, requestID string) *returnResponse {
	return &returnResponse{XMLName: xml.Name{Local: action + "Response"}, Xmlns: Namespace, RequestID: requestID, Return: true}
}

type xmlEBS struct {
	SnapshotID          string `xml:"snapshotId"`
	VolumeSize          int    `xml:"volumeSize"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
	VolumeType          string `xml:"volumeType"`
	Encrypted           bool   `xml:"encrypted"`
}

type xmlBlockDevice struct {
	DeviceName string `xml:"deviceName"`
	EBS        xmlEBS `xml:"ebs"`
}

type xmlImage struct {
	ImageID          string           `xml:"imageId"`
	ImageLocation    string           `xml:"imageLocation"`
	ImageState       string           `xml:"imageState"`
	ImageOwnerID     string           `xml:"imageOwnerId"`
	CreationDate     string           `xml:"creationDate"`
	IsPublic         bool             `xml:"isPublic"`
	Architecture     string           `xml:"architecture"`
	ImageType        string           `xml:"imageType"`
	Name             string           `xml:"name"`
	RootDeviceType   string           `xml:"rootDeviceType"`
	RootDeviceName   string           `xml:"rootDeviceName"`
	BlockDevices     []xmlBlockDevice `xml:"blockDeviceMapping>item"`
	VirtualizationTy string           `xml:"virtualizationType"`
	Tags             []xmlTag         `xml:"tagSet>item"`
}

type describeImagesResponse struct {
	XMLName   xml.Name   `xml:"DescribeImagesResponse"`
	Xmlns     string     `xml:"xmlns,attr"`
	RequestID string     `xml:"requestId"`
	Images    []xmlImage `xml:"imagesSet>item"`
	NextToken string     `xml:"nextToken,omitempty"`
}

type xmlDeleteSnapshotResult struct {
	SnapshotID string `xml:"snapshotId"`
	ReturnCode string `xml:"returnCode"`
}

type deregisterImageResponse struct {
	XMLName   xml.Name                  `xml:"DeregisterImageResponse"`
	Xmlns     string                    `xml:"xmlns,attr"`
	RequestID string                    `xml:"requestId"`
	Return    bool                      `xml:"return"`
	Deleted   []xmlDeleteSnapshotResult `xml:"deleteSnapshotResultSet>item"`
}

type xmlSpotStatus struct {
	Code       string `xml:"code"`
	UpdateTime string `xml:"updateTime"`
	Message    string `xml:"message"`
}

type xmlSpotRequest struct {
	SpotInstanceRequestID        string        `xml:"spotInstanceRequestId"`
	SpotPrice                    string        `xml:"spotPrice"`
	Type                         string        `xml:"type"`
	State                        string        `xml:"state"`
	Status                       xmlSpotStatus `xml:"status"`
	InstanceID                   string        `xml:"instanceId,omitempty"`
	CreateTime                   string        `xml:"createTime"`
	ProductDescription           string        `xml:"productDescription"`
	LaunchedAvailabilityZone     string        `xml:"launchedAvailabilityZone,omitempty"`
	InstanceInterruptionBehavior string        `xml:"instanceInterruptionBehavior"`
	Tags                         []xmlTag      `xml:"tagSet>item"`
}

type describeSpotInstanceRequestsResponse struct {
	XMLName   xml.Name         `xml:"DescribeSpotInstanceRequestsResponse"`
	Xmlns     string           `xml:"xmlns,attr"`
	RequestID string           `xml:"requestId"`
	Requests  []xmlSpotRequest `xml:"spotInstanceRequestSet>item"`
	NextToken string           `xml:"nextToken,omitempty"`
}

type xmlCancelledSpotRequest struct {
	SpotInstanceRequestID string `xml:"spotInstanceRequestId"`
	State                 string `xml:"state"`
}

type cancelSpotInstanceRequestsResponse struct {
	XMLName   xml.Name                  `xml:"CancelSpotInstanceRequestsResponse"`
	Xmlns     string                    `xml:"xmlns,attr"`
	RequestID string                    `xml:"requestId"`
	Requests  []xmlCancelledSpotRequest `xml:"spotInstanceRequestSet>item"`
}

func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
