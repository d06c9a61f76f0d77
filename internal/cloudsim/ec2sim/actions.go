package ec2sim

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/norsk-go/norsk-manager/internal/cloudsim"
)

// Instance state codes, as EC2 numbers them.
var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

var (
	amiRE    = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	subnetRE = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
)

// list reads a Query API list: prefix.1, prefix.2, …
func list(form url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[fmt.Sprintf("%s.%d", prefix, i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// filter is one Filter.N of a Describe call.
type filter struct {
	name   string
	values []string
}

func filters(form url.Values) []filter {
	var out []filter
	for i := 1; ; i++ {
		p := fmt.Sprintf("Filter.%d", i)
		name := form.Get(p + ".Name")
		if name == "" {
			return out
		}
		out = append(out, filter{name: name, values: list(form, p+".Value")})
	}
}

// tagSpecs reads TagSpecification.N for instances.
func tagSpecs(form url.Values) map[string]string {
	tags := map[string]string{}
	for i := 1; ; i++ {
		p := fmt.Sprintf("TagSpecification.%d", i)
		rt := form.Get(p + ".ResourceType")
		if rt == "" {
			return tags
		}
		if rt != "instance" {
			continue
		}
		for j := 1; ; j++ {
			k, ok := form[fmt.Sprintf("%s.Tag.%d.Key", p, j)]
			if !ok {
				break
			}
			tags[k[0]] = form.Get(fmt.Sprintf("%s.Tag.%d.Value", p, j))
		}
	}
}

func (s *Server) newInstance(region, zone, typ, image, subnet string, groups []string, tags map[string]string, token string, userData []byte) *instance {
	s.ipSeq++
	in := &instance{
		ID: newID("i-"), Region: region, Zone: zone, Type: typ, Image: image, Subnet: subnet, SecurityGroups: groups,
		State: "pending", Tags: tags, LaunchTime: time.Now().UTC().Truncate(time.Millisecond), ClientToken: token, UserData: userData,
		PrivateIP: fmt.Sprintf("10.0.%d.%d", (s.ipSeq/250)%250, s.ipSeq%250+2), Reservation: newID("r-"),
	}
	if in.Tags == nil {
		in.Tags = map[string]string{}
	}
	s.instances[in.ID] = in
	s.order = append(s.order, in.ID)
	if token != "" {
		s.tokens[region+"/"+token] = in.ID
	}
	s.saveLocked()
	return in
}

func (s *Server) runInstances(region string, form url.Values) (any, *apiError) {
	image, typ, token := form.Get("ImageId"), form.Get("InstanceType"), form.Get("ClientToken")
	zone, subnet := form.Get("Placement.AvailabilityZone"), form.Get("SubnetId")
	groups := list(form, "SecurityGroupId")
	r := s.opts.Regions[region]
	switch {
	case image == "":
		return nil, &apiError{http.StatusBadRequest, "MissingParameter", "The request must contain the parameter ImageId"}
	case !amiRE.MatchString(image):
		return nil, &apiError{http.StatusBadRequest, "InvalidAMIID.Malformed", fmt.Sprintf("Invalid id: %q (expecting \"ami-...\")", image)}
	case len(s.opts.Images) > 0 && !strIn(image, s.opts.Images):
		return nil, &apiError{http.StatusBadRequest, "InvalidAMIID.NotFound", fmt.Sprintf("The image id '[%s]' does not exist", image)}
	case typ == "":
		typ = "m1.small"
		fallthrough
	case s.catalogType(typ) == nil:
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("Invalid value '%s' for InstanceType.", typ)}
	case form.Get("MinCount") != "1" || form.Get("MaxCount") != "1":
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", "this endpoint launches one instance per call (MinCount = MaxCount = 1)"}
	case zone != "" && !zoneOK(r.Zones, zone):
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("Invalid availability zone: [%s]", zone)}
	case subnet != "" && !subnetRE.MatchString(subnet):
		return nil, &apiError{http.StatusBadRequest, "InvalidSubnetID.NotFound", fmt.Sprintf("The subnet ID '%s' does not exist", subnet)}
	case len(token) > 64:
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", "ClientToken is longer than 64 characters"}
	}
	for _, g := range groups {
		if s.group(region, g) == nil {
			return nil, &apiError{http.StatusBadRequest, "InvalidGroup.NotFound", fmt.Sprintf("The security group '%s' does not exist", g)}
		}
	}
	if zone == "" {
		zone = r.Zones[0]
		if subnet != "" {
			// A subnet lives in one zone: the sim spreads subnets over
			// the zones by their id.
			zone = r.Zones[int(subnet[len(subnet)-1])%len(r.Zones)]
		}
	}
	if !s.offered(region, typ) {
		return nil, &apiError{http.StatusBadRequest, "Unsupported", fmt.Sprintf("Your requested instance type (%s) is not supported in your requested Availability Zone (%s).", typ, zone)}
	}
	var userData []byte
	if ud := form.Get("UserData"); ud != "" {
		b, err := base64.StdEncoding.DecodeString(ud)
		if err != nil {
			return nil, &apiError{http.StatusBadRequest, "InvalidUserData.Malformed", "User data must be base64 encoded"}
		}
		if len(b) > 16<<10 {
			return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", "User data is limited to 16384 bytes"}
		}
		userData = b
	}
	tags := tagSpecs(form)
	s.mu.Lock()
	if token != "" {
		if id, ok := s.tokens[region+"/"+token]; ok {
			in := s.instances[id]
			if in.Image != image || in.Type != typ {
				s.mu.Unlock()
				return nil, &apiError{http.StatusBadRequest, "IdempotentParameterMismatch",
					"Arguments on this idempotent request are inconsistent with arguments used in previous request(s)."}
			}
			out := &runInstancesResponse{ReservationID: in.Reservation, OwnerID: ownerID, Instances: []xmlInstance{s.xmlOf(in)}}
			s.mu.Unlock()
			return out, nil // the first launch's instance: nothing new
		}
	}
	if s.TakeNoCapacity(typ, zone) {
		s.mu.Unlock()
		return nil, &apiError{http.StatusInternalServerError, "InsufficientInstanceCapacity", fmt.Sprintf(
			"We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity. You can currently get %s capacity by not specifying an Availability Zone in your request or choosing %s.",
			typ, zone, typ, strings.Join(otherZones(r.Zones, zone), ", "))}
	}
	in := s.newInstance(region, zone, typ, image, subnet, groups, tags, token, userData)
	out := &runInstancesResponse{ReservationID: in.Reservation, OwnerID: ownerID, Instances: []xmlInstance{s.xmlOf(in)}}
	s.mu.Unlock()
	s.log.Info("ec2sim: instance launched", "instance", in.ID, "region", region, "zone", zone, "type", typ, "node", tags["norsk:node"])
	go s.boot(in)
	return out, nil
}

func otherZones(zones []string, z string) []string {
	var out []string
	for _, x := range zones {
		if x != z {
			out = append(out, x)
		}
	}
	return out
}

// xmlOf renders an instance (mu held).
func (s *Server) xmlOf(in *instance) xmlInstance {
	x := xmlInstance{
		InstanceID: in.ID, ImageID: in.Image, State: xmlState{Code: stateCodes[in.State], Name: in.State},
		InstanceType: in.Type, LaunchTime: in.LaunchTime.Format("2006-01-02T15:04:05.000Z"),
		Placement: xmlPlacement{AvailabilityZone: in.Zone, Tenancy: "default"}, SubnetID: in.Subnet, ClientToken: in.ClientToken,
		Architecture: "x86_64",
	}
	if t := s.catalogType(in.Type); t != nil && len(t.Architectures) > 0 {
		x.Architecture = t.Architectures[0]
	}
	if in.State != "terminated" {
		x.PrivateIP = in.PrivateIP
		x.PrivateDNSName = "ip-" + strings.ReplaceAll(in.PrivateIP, ".", "-") + "." + in.Region + ".compute.internal"
	}
	if in.Subnet != "" {
		x.VpcID = "vpc-0cloudsim000000"
	}
	if in.StateReason != "" {
		x.StateReason = &xmlStateReason{Code: "Client.UserInitiatedShutdown", Message: in.StateReason}
	}
	for _, g := range in.SecurityGroups {
		name := g
		if sg := s.group(in.Region, g); sg != nil {
			name = sg.Name
		}
		x.Groups = append(x.Groups, xmlGroup{GroupID: g, GroupName: name})
	}
	keys := make([]string, 0, len(in.Tags))
	for k := range in.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		x.Tags = append(x.Tags, xmlTag{Key: k, Value: in.Tags[k]})
	}
	return x
}

// matches reports whether an instance passes every filter.
func matches(in *instance, fs []filter) bool {
	for _, f := range fs {
		var have []string
		switch {
		case f.name == "instance-state-name":
			have = []string{in.State}
		case f.name == "instance-id":
			have = []string{in.ID}
		case f.name == "instance-type":
			have = []string{in.Type}
		case f.name == "availability-zone":
			have = []string{in.Zone}
		case f.name == "client-token":
			have = []string{in.ClientToken}
		case f.name == "tag-key":
			for k := range in.Tags {
				have = append(have, k)
			}
		case strings.HasPrefix(f.name, "tag:"):
			if v, ok := in.Tags[strings.TrimPrefix(f.name, "tag:")]; ok {
				have = []string{v}
			}
		default:
			return false
		}
		ok := false
		for _, h := range have {
			if strIn(h, f.values) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

var knownInstanceFilters = map[string]bool{"instance-state-name": true, "instance-id": true, "instance-type": true, "availability-zone": true, "client-token": true, "tag-key": true}

func (s *Server) describeInstances(region string, form url.Values) (any, *apiError) {
	fs := filters(form)
	for _, f := range fs {
		if !knownInstanceFilters[f.name] && !strings.HasPrefix(f.name, "tag:") {
			return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid", f.name)}
		}
	}
	ids := list(form, "InstanceId")
	s.mu.Lock()
	defer s.mu.Unlock()
	var sel []*instance
	for _, id := range s.order {
		in := s.instances[id]
		if in.Region != region || !matches(in, fs) || (len(ids) > 0 && !strIn(in.ID, ids)) {
			continue
		}
		sel = append(sel, in)
	}
	for _, id := range ids {
		if in, ok := s.instances[id]; !ok || in.Region != region {
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id)}
		}
	}
	page, next, aerr := paginate(len(sel), form, 1000)
	if aerr != nil {
		return nil, aerr
	}
	out := &describeInstancesResponse{NextToken: next}
	for _, in := range sel[page[0]:page[1]] {
		out.Reservations = append(out.Reservations, xmlReservation{ReservationID: in.Reservation, OwnerID: ownerID, Instances: []xmlInstance{s.xmlOf(in)}})
	}
	return out, nil
}

// paginate is the [from, to) of the page asked for (NextToken, MaxResults
// at most max) and the next page's token.
func paginate(n int, form url.Values, max int) ([2]int, string, *apiError) {
	from := 0
	if t := form.Get("NextToken"); t != "" {
		v, err := strconv.Atoi(t)
		if err != nil || v < 0 || v > n {
			return [2]int{}, "", &apiError{http.StatusBadRequest, "InvalidParameterValue", "Invalid NextToken"}
		}
		from = v
	}
	size := max
	if m := form.Get("MaxResults"); m != "" {
		v, err := strconv.Atoi(m)
		if err != nil || v < 5 || v > max {
			return [2]int{}, "", &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("MaxResults must be between 5 and %d", max)}
		}
		size = v
	}
	to := min(n, from+size)
	next := ""
	if to < n {
		next = strconv.Itoa(to)
	}
	return [2]int{from, to}, next, nil
}

// terminateLocked starts an instance's termination; the caller stops the
// machine returned, outside the lock.
func (s *Server) terminateLocked(in *instance, reason string) cloudsim.Machine {
	if in.State == "terminated" {
		return nil
	}
	m := in.machine
	in.machine, in.State, in.StateReason = nil, "terminated", reason
	s.saveLocked()
	return m
}

func (s *Server) terminateInstances(region string, form url.Values) (any, *apiError) {
	ids := list(form, "InstanceId")
	if len(ids) == 0 {
		return nil, &apiError{http.StatusBadRequest, "MissingParameter", "The request must contain the parameter InstanceId"}
	}
	s.mu.Lock()
	for _, id := range ids {
		if in, ok := s.instances[id]; !ok || in.Region != region {
			s.mu.Unlock()
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id)}
		}
	}
	out := &terminateInstancesResponse{}
	var stop []cloudsim.Machine
	for _, id := range ids {
		in := s.instances[id]
		prev := in.State
		if m := s.terminateLocked(in, "User initiated shutdown"); m != nil {
			stop = append(stop, m)
		}
		cur := "shutting-down"
		if prev == "terminated" {
			cur = "terminated"
		}
		out.Changes = append(out.Changes, xmlStateChange{InstanceID: id, CurrentState: xmlState{Code: stateCodes[cur], Name: cur},
			PreviousState: xmlState{Code: stateCodes[prev], Name: prev}})
	}
	s.mu.Unlock()
	for _, m := range stop {
		go s.stop(m)
	}
	s.log.Info("ec2sim: instances terminated", "instances", strings.Join(ids, ","))
	return out, nil
}

func (s *Server) createTags(region string, form url.Values) (any, *apiError) {
	ids := list(form, "ResourceId")
	if len(ids) == 0 {
		return nil, &apiError{http.StatusBadRequest, "MissingParameter", "The request must contain the parameter ResourceId"}
	}
	tags := map[string]string{}
	for i := 1; ; i++ {
		k, ok := form[fmt.Sprintf("Tag.%d.Key", i)]
		if !ok {
			break
		}
		if strings.HasPrefix(strings.ToLower(k[0]), "aws:") {
			return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use"}
		}
		tags[k[0]] = form.Get(fmt.Sprintf("Tag.%d.Value", i))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		in, ok := s.instances[id]
		if !ok || in.Region != region {
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id)}
		}
		if len(in.Tags)+len(tags) > 50 {
			return nil, &apiError{http.StatusBadRequest, "TagLimitExceeded", "The maximum number of Tags for a resource has been reached."}
		}
	}
	for _, id := range ids {
		for k, v := range tags {
			s.instances[id].Tags[k] = v
		}
	}
	s.saveLocked()
	return &createTagsResponse{Return: true}, nil
}

func (s *Server) describeInstanceTypes(region string, form url.Values) (any, *apiError) {
	want := list(form, "InstanceType")
	var sel []InstanceType
	for _, t := range s.opts.Catalog {
		if len(want) > 0 && !strIn(t.Name, want) {
			continue
		}
		sel = append(sel, t)
	}
	for _, w := range want {
		if s.catalogType(w) == nil {
			return nil, &apiError{http.StatusBadRequest, "InvalidInstanceType", fmt.Sprintf("The following supplied instance types do not exist: [%s]", w)}
		}
	}
	page, next, aerr := paginate(len(sel), form, 100)
	if aerr != nil {
		return nil, aerr
	}
	out := &describeInstanceTypesResponse{NextToken: next}
	for _, t := range sel[page[0]:page[1]] {
		x := xmlInstanceType{InstanceType: t.Name, CurrentGeneration: true}
		x.VCPU.DefaultVCpus, x.VCPU.DefaultCores = t.VCPUs, max(t.VCPUs/2, 1)
		x.Memory.SizeInMiB = t.MemoryMiB
		x.Processor.Architectures = t.Architectures
		if t.GPUs > 0 {
			x.Gpus = &struct {
				Gpus []xmlGpu `xml:"gpus>item"`
			}{Gpus: []xmlGpu{{Count: t.GPUs, Manufacturer: "NVIDIA", Name: "A10G"}}}
		}
		out.Types = append(out.Types, x)
	}
	return out, nil
}

func (s *Server) describeOfferings(region string, form url.Values) (any, *apiError) {
	lt := form.Get("LocationType")
	if lt == "" {
		lt = "region"
	}
	if lt != "region" && lt != "availability-zone" {
		return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("Invalid LocationType %q", lt)}
	}
	var sel []xmlOffering
	locs := []string{region}
	if lt == "availability-zone" {
		locs = s.opts.Regions[region].Zones
	}
	fs := filters(form)
	for _, t := range s.opts.Catalog {
		if !s.offered(region, t.Name) {
			continue
		}
		for _, loc := range locs {
			ok := true
			for _, f := range fs {
				switch f.name {
				case "location":
					ok = ok && strIn(loc, f.values)
				case "instance-type":
					ok = ok && strIn(t.Name, f.values)
				default:
					return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid", f.name)}
				}
			}
			if ok {
				sel = append(sel, xmlOffering{InstanceType: t.Name, LocationType: lt, Location: loc})
			}
		}
	}
	page, next, aerr := paginate(len(sel), form, 1000)
	if aerr != nil {
		return nil, aerr
	}
	return &describeOfferingsResponse{Offerings: sel[page[0]:page[1]], NextToken: next}, nil
}

func (s *Server) group(region, id string) *SecurityGroup {
	r := s.opts.Regions[region]
	for i := range r.SecurityGroups {
		if r.SecurityGroups[i].ID == id {
			return &r.SecurityGroups[i]
		}
	}
	return nil
}

func (s *Server) describeSecurityGroups(region string, form url.Values) (any, *apiError) {
	ids := list(form, "GroupId")
	fs := filters(form)
	for _, id := range ids {
		if s.group(region, id) == nil {
			return nil, &apiError{http.StatusBadRequest, "InvalidGroup.NotFound", fmt.Sprintf("The security group '%s' does not exist", id)}
		}
	}
	out := &describeSecurityGroupsResponse{}
	for _, g := range s.opts.Regions[region].SecurityGroups {
		if len(ids) > 0 && !strIn(g.ID, ids) {
			continue
		}
		ok := true
		for _, f := range fs {
			switch {
			case f.name == "tag-key":
				found := false
				for k := range g.Tags {
					found = found || strIn(k, f.values)
				}
				ok = ok && found
			case strings.HasPrefix(f.name, "tag:"):
				v, has := g.Tags[strings.TrimPrefix(f.name, "tag:")]
				ok = ok && has && strIn(v, f.values)
			case f.name == "group-id":
				ok = ok && strIn(g.ID, f.values)
			default:
				return nil, &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("The filter '%s' is invalid", f.name)}
			}
		}
		if !ok {
			continue
		}
		x := xmlSecurityGroup{OwnerID: ownerID, GroupID: g.ID, GroupName: g.Name, Description: g.Description, VpcID: g.VPC}
		for _, r := range g.Ingress {
			p := xmlPermission{Protocol: r.Protocol, FromPort: r.FromPort, ToPort: r.ToPort}
			for _, c := range r.CIDRs {
				p.IPRanges = append(p.IPRanges, xmlIPRange{CidrIP: c, Description: r.Description})
			}
			for _, gid := range r.Groups {
				p.Groups = append(p.Groups, xmlGroupPair{GroupID: gid, UserID: ownerID})
			}
			x.Ingress = append(x.Ingress, p)
		}
		keys := make([]string, 0, len(g.Tags))
		for k := range g.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			x.Tags = append(x.Tags, xmlTag{Key: k, Value: g.Tags[k]})
		}
		out.Groups = append(out.Groups, x)
	}
	return out, nil
}

func (s *Server) describeRegions(form url.Values) (any, *apiError) {
	want := list(form, "RegionName")
	names := make([]string, 0, len(s.opts.Regions))
	for r := range s.opts.Regions {
		names = append(names, r)
	}
	sort.Strings(names)
	out := &describeRegionsResponse{}
	for _, r := range names {
		if len(want) > 0 && !strIn(r, want) {
			continue
		}
		out.Regions = append(out.Regions, xmlRegion{Name: r, Endpoint: strings.TrimPrefix(s.URL(), "http://"), OptIn: "opt-in-not-required"})
	}
	return out, nil
}

func (s *Server) describeZones(region string, form url.Values) (any, *apiError) {
	want := list(form, "ZoneName")
	out := &describeZonesResponse{}
	for i, z := range s.opts.Regions[region].Zones {
		if len(want) > 0 && !strIn(z, want) {
			continue
		}
		out.Zones = append(out.Zones, xmlZone{Name: z, State: "available", Region: region, ID: fmt.Sprintf("%s-az%d", region, i+1),
			Type: "availability-zone", OptIn: "opt-in-not-required"})
	}
	return out, nil
}
