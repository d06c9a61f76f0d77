// Package ec2sim is test equipment: a local endpoint speaking the EC2 Query
// API — RunInstances, DescribeInstances, TerminateInstances, CreateTags,
// DescribeInstanceTypes, DescribeInstanceTypeOfferings,
// DescribeSecurityGroups, DescribeRegions, DescribeAvailabilityZones —
// with XML answers and EC2's error shapes, requests verified against
// their SigV4 signatures, ClientToken idempotency, and faults a test can
// turn on (request-limit throttling, insufficient capacity, a held answer).
// The aws provider reaches it through the AWS SDK exactly as it reaches
// EC2 (AWS_ENDPOINT_URL_EC2, or endpoint_url in a profile).
//
// Its instances boot the worker from their user data through a
// cloudsim.Runner; terminating one stops its machine. State is in memory,
// and in StateFile when given (dev keeps instances across restarts: they
// are booted again, as after a host reboot).
package ec2sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
)

// Default credentials the endpoint verifies signatures with.
const (
	DefaultAccessKeyID     = "AKIANORSKCLOUDSIM01"
	DefaultSecretAccessKey = "norsk-cloudsim-secret-access-key-not-a-secret"
	ownerID                = "123456789012"
)

// InstanceType is one type of the endpoint's catalog.
type InstanceType struct {
	Name          string   `json:"name"`
	VCPUs         int      `json:"vcpus"`
	MemoryMiB     int64    `json:"memoryMiB"`
	Architectures []string `json:"architectures"`
	GPUs          int      `json:"gpus,omitempty"`
}

// DefaultCatalog is a small catalog of real EC2 types.
var DefaultCatalog = []InstanceType{
	{Name: "t3.micro", VCPUs: 2, MemoryMiB: 1024, Architectures: []string{"x86_64"}},
	{Name: "c6i.large", VCPUs: 2, MemoryMiB: 4096, Architectures: []string{"x86_64"}},
	{Name: "c6i.xlarge", VCPUs: 4, MemoryMiB: 8192, Architectures: []string{"x86_64"}},
	{Name: "c6i.2xlarge", VCPUs: 8, MemoryMiB: 16384, Architectures: []string{"x86_64"}},
	{Name: "c6i.4xlarge", VCPUs: 16, MemoryMiB: 32768, Architectures: []string{"x86_64"}},
	{Name: "c7g.xlarge", VCPUs: 4, MemoryMiB: 8192, Architectures: []string{"arm64"}},
	{Name: "g5.xlarge", VCPUs: 4, MemoryMiB: 16384, Architectures: []string{"x86_64"}, GPUs: 1},
}

// SecurityGroup is a security group of a region.
type SecurityGroup struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	VPC         string            `json:"vpc"`
	Tags        map[string]string `json:"tags"`
	Ingress     []Rule            `json:"ingress"`
}

// Rule is an ingress rule.
type Rule struct {
	Protocol    string   `json:"protocol"`
	FromPort    int32    `json:"fromPort"`
	ToPort      int32    `json:"toPort"`
	CIDRs       []string `json:"cidrs,omitempty"`
	Groups      []string `json:"groups,omitempty"`
	Description string   `json:"description,omitempty"`
}

// Region is one region of the endpoint.
type Region struct {
	// Zones are its availability zones (default <region>a, b, c).
	Zones []string
	// InstanceTypes are the catalog types offered in the region (default:
	// every one).
	InstanceTypes []string
	// SecurityGroups exist in the region.
	SecurityGroups []SecurityGroup
}

// Options configure a Server.
type Options struct {
	// Listen is the endpoint's address (default 127.0.0.1:0).
	Listen string
	// Regions are the regions it serves (default: eu-west-1).
	Regions map[string]Region
	// Catalog is its instance types (default DefaultCatalog).
	Catalog []InstanceType
	// Images are the AMIs RunInstances accepts (default: any well-formed
	// ami-… id).
	Images []string
	// AccessKeyID and SecretAccessKey are the credentials requests must be
	// signed with (defaults DefaultAccessKeyID, DefaultSecretAccessKey).
	AccessKeyID, SecretAccessKey string
	// Runner boots instances' machines (nil: instances run nothing).
	Runner cloudsim.Runner
	// StateFile keeps the state across restarts ("" = memory only).
	StateFile string
	Logger    *slog.Logger
}

// instance is an instance's record.
type instance struct {
	ID             string            `json:"id"`
	Region         string            `json:"region"`
	Zone           string            `json:"zone"`
	Type           string            `json:"type"`
	Image          string            `json:"image"`
	Subnet         string            `json:"subnet"`
	SecurityGroups []string          `json:"securityGroups"`
	State          string            `json:"state"`
	StateReason    string            `json:"stateReason,omitempty"`
	Tags           map[string]string `json:"tags"`
	LaunchTime     time.Time         `json:"launchTime"`
	ClientToken    string            `json:"clientToken"`
	UserData       []byte            `json:"userData"`
	PrivateIP      string            `json:"privateIp"`
	Reservation    string            `json:"reservation"`

	machine cloudsim.Machine
}

// Server is a running EC2 endpoint.
type Server struct {
	opts Options
	log  *slog.Logger
	ln   net.Listener
	srv  *http.Server

	mu        sync.Mutex
	instances map[string]*instance
	order     []string
	tokens    map[string]string // region/clientToken → instance id
	calls     map[string]int
	ipSeq     int
	// faults
	// Faults are the faults a test injects (Throttle, NoCapacity).
	cloudsim.Faults
	holds  map[string]chan struct{}
	before map[string]bool
	noBoot bool
	wg     sync.WaitGroup
}

// Start serves an endpoint until Close.
func Start(opts Options) (*Server, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if len(opts.Regions) == 0 {
		opts.Regions = map[string]Region{"eu-west-1": {}}
	}
	for name, r := range opts.Regions {
		if len(r.Zones) == 0 {
			r.Zones = []string{name + "a", name + "b", name + "c"}
			opts.Regions[name] = r
		}
	}
	if len(opts.Catalog) == 0 {
		opts.Catalog = DefaultCatalog
	}
	if opts.AccessKeyID == "" {
		opts.AccessKeyID, opts.SecretAccessKey = DefaultAccessKeyID, DefaultSecretAccessKey
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, log: opts.Logger.With("component", "ec2sim"), instances: map[string]*instance{}, tokens: map[string]string{},
		calls: map[string]int{}, holds: map[string]chan struct{}{}, before: map[string]bool{}}
	if err := s.load(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("ec2sim: listen on %s: %w", opts.Listen, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	s.rebootAll()
	return s, nil
}

// URL is the endpoint's URL (AWS_ENDPOINT_URL_EC2).
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Credentials are the access key and secret requests are signed with.
func (s *Server) Credentials() (string, string) { return s.opts.AccessKeyID, s.opts.SecretAccessKey }

// Close stops serving and stops every machine (the instances keep their
// state: with a StateFile, the next Start boots them again).
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.mu.Lock()
	for _, ch := range s.holds {
		close(ch)
	}
	s.holds = map[string]chan struct{}{}
	s.mu.Unlock()
	err := s.srv.Shutdown(ctx)
	s.wg.Wait()
	s.mu.Lock()
	var ms []cloudsim.Machine
	for _, in := range s.instances {
		if in.machine != nil {
			ms = append(ms, in.machine)
			in.machine = nil
		}
	}
	s.mu.Unlock()
	for _, m := range ms {
		_ = m.Stop(context.Background())
	}
	return err
}

// ServeHTTP answers one Query API call.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := newRequestID()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		s.fail(w, reqID, http.StatusBadRequest, "InvalidRequest", err.Error())
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		s.fail(w, reqID, http.StatusBadRequest, "MalformedQueryString", err.Error())
		return
	}
	for k, vs := range r.URL.Query() {
		form[k] = append(form[k], vs...)
	}
	action := form.Get("Action")
	cred, err := verifySigV4(r, body, s.opts.AccessKeyID, s.opts.SecretAccessKey, time.Now())
	if err != nil {
		s.fail(w, reqID, http.StatusUnauthorized, "AuthFailure", err.Error())
		return
	}
	region := cred.region
	if _, ok := s.opts.Regions[region]; !ok {
		s.fail(w, reqID, http.StatusUnauthorized, "AuthFailure", fmt.Sprintf("this endpoint does not serve region %q", region))
		return
	}
	s.mu.Lock()
	s.calls[action]++
	throttled := s.TakeThrottle()
	s.mu.Unlock()
	if throttled {
		s.fail(w, reqID, http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded.")
		return
	}
	if s.holdsBefore(action) {
		s.hold(r.Context(), action)
		if r.Context().Err() != nil {
			return // the caller gave up before the call was made
		}
	}
	var out any
	var aerr *apiError
	switch action {
	case "RunInstances":
		out, aerr = s.runInstances(region, form)
	case "DescribeInstances":
		out, aerr = s.describeInstances(region, form)
	case "TerminateInstances":
		out, aerr = s.terminateInstances(region, form)
	case "CreateTags":
		out, aerr = s.createTags(region, form)
	case "DescribeInstanceTypes":
		out, aerr = s.describeInstanceTypes(region, form)
	case "DescribeInstanceTypeOfferings":
		out, aerr = s.describeOfferings(region, form)
	case "DescribeSecurityGroups":
		out, aerr = s.describeSecurityGroups(region, form)
	case "DescribeRegions":
		out, aerr = s.describeRegions(form)
	case "DescribeAvailabilityZones":
		out, aerr = s.describeZones(region, form)
	case "":
		aerr = &apiError{http.StatusBadRequest, "MissingAction", "The request must contain the parameter Action."}
	default:
		aerr = &apiError{http.StatusBadRequest, "InvalidAction", fmt.Sprintf("The action %s is not valid for this web service.", action)}
	}
	if aerr != nil {
		s.fail(w, reqID, aerr.status, aerr.code, aerr.msg)
		return
	}
	if !s.holdsBefore(action) {
		s.hold(r.Context(), action)
	}
	setRequestID(out, reqID)
	b, err := xml.Marshal(out)
	if err != nil {
		s.fail(w, reqID, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("X-Amzn-RequestId", reqID)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(b)
}

// apiError is an EC2 error answer.
type apiError struct {
	status    int
	code, msg string
}

func (s *Server) fail(w http.ResponseWriter, reqID string, status int, code, msg string) {
	b, _ := xml.Marshal(errorResponse{Errors: []xmlErr{{Code: code, Message: msg}}, RequestID: reqID})
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(b)
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func newID(prefix string) string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)[:17]
}

// setRequestID stamps a response struct's RequestID field.
func setRequestID(out any, id string) {
	switch o := out.(type) {
	case *runInstancesResponse:
		o.RequestID, o.Xmlns = id, xmlns
	case *describeInstancesResponse:
		o.RequestID, o.Xmlns = id, xmlns
	case *terminateInstancesResponse:
		o.RequestID, o.Xmlns = id, xmlns
	case *createTagsResponse:
		o.RequestID, o.Xmlns = id, xmlns
	case *describeInstanceTypesResponse:
		o.RequestID, o.Xmlns = id, xmlns
	case *describeOfferingsResponse:
		o.RequestID, o.Xmlns = id, xmlns
	case *describeSecurityGroupsResponse:
		o.RequestID, o.Xmlns = id, xmlns
	case *describeRegionsResponse:
		o.RequestID, o.Xmlns = id, xmlns
	case *describeZonesResponse:
		o.RequestID, o.Xmlns = id, xmlns
	}
}

// Faults and observations, for tests.

// Hold makes calls of action wait until release is called or the caller
// gives up: after they are processed (a launch whose answer never
// arrives), or with before, before (a call that never reached the cloud).
func (s *Server) Hold(action string, before bool) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.holds[action] = ch
	s.before[action] = before
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.holds[action] == ch {
				delete(s.holds, action)
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

func (s *Server) holdsBefore(action string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds[action] != nil && s.before[action]
}

// DontBoot makes new instances boot nothing (a broken image): they run,
// and their worker never registers.
func (s *Server) DontBoot(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noBoot = on
}

func (s *Server) hold(ctx context.Context, action string) {
	s.mu.Lock()
	ch := s.holds[action]
	s.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// Calls is how many calls of action were made.
func (s *Server) Calls(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[action]
}

// Instance is an instance as a test sees it.
type Instance struct {
	ID, Region, Zone, Type, Image, State, ClientToken string
	Tags                                              map[string]string
	SecurityGroups                                    []string
	UserData                                          []byte
}

// Instances lists every instance, in launch order.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Instance
	for _, id := range s.order {
		in := s.instances[id]
		tags := map[string]string{}
		for k, v := range in.Tags {
			tags[k] = v
		}
		out = append(out, Instance{ID: in.ID, Region: in.Region, Zone: in.Zone, Type: in.Type, Image: in.Image, State: in.State,
			ClientToken: in.ClientToken, Tags: tags, SecurityGroups: append([]string(nil), in.SecurityGroups...), UserData: in.UserData})
	}
	return out
}

// Running lists the instances not terminated.
func (s *Server) Running() []Instance {
	var out []Instance
	for _, in := range s.Instances() {
		if in.State != "terminated" && in.State != "shutting-down" {
			out = append(out, in)
		}
	}
	return out
}

// Launch starts an instance outside any client (a leak a test plants, or
// an operator's own instance): tags as given, no user data unless given.
func (s *Server) Launch(region, instanceType string, tags map[string]string, userData []byte) (string, error) {
	if _, ok := s.opts.Regions[region]; !ok {
		return "", fmt.Errorf("ec2sim: no region %q", region)
	}
	s.mu.Lock()
	in := s.newInstance(region, s.opts.Regions[region].Zones[0], instanceType, "ami-0000000000000000", "", nil, tags, "", userData)
	s.mu.Unlock()
	s.boot(in)
	return in.ID, nil
}

// TerminateOutOfBand terminates an instance as someone else would (the
// console, a spot reclaim): its node's Manager learns it only by listing.
func (s *Server) TerminateOutOfBand(id, reason string) error {
	s.mu.Lock()
	in, ok := s.instances[id]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("ec2sim: no instance %s", id)
	}
	m := s.terminateLocked(in, reason)
	s.mu.Unlock()
	s.stop(m)
	return nil
}

// State file.

type stateFile struct {
	Instances []*instance `json:"instances"`
	IPSeq     int         `json:"ipSeq"`
}

func (s *Server) load() error {
	if s.opts.StateFile == "" {
		return nil
	}
	b, err := os.ReadFile(s.opts.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ec2sim: state file: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("ec2sim: state file %s: %w", s.opts.StateFile, err)
	}
	sort.SliceStable(st.Instances, func(i, j int) bool { return st.Instances[i].LaunchTime.Before(st.Instances[j].LaunchTime) })
	for _, in := range st.Instances {
		s.instances[in.ID] = in
		s.order = append(s.order, in.ID)
		if in.ClientToken != "" {
			s.tokens[in.Region+"/"+in.ClientToken] = in.ID
		}
	}
	s.ipSeq = st.IPSeq
	return nil
}

// saveLocked writes the state file (mu held).
func (s *Server) saveLocked() {
	if s.opts.StateFile == "" {
		return
	}
	st := stateFile{IPSeq: s.ipSeq}
	for _, id := range s.order {
		st.Instances = append(st.Instances, s.instances[id])
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err == nil {
		err = atomicfile.WriteFile(s.opts.StateFile, b, 0o600)
	}
	if err != nil {
		s.log.Warn("ec2sim: could not save the state file", "err", err)
	}
}

// rebootAll boots the machines of the instances a state file says run.
func (s *Server) rebootAll() {
	s.mu.Lock()
	var boot []*instance
	for _, id := range s.order {
		if in := s.instances[id]; in.State == "pending" || in.State == "running" {
			boot = append(boot, in)
		}
	}
	s.mu.Unlock()
	for _, in := range boot {
		s.boot(in)
	}
}

// boot starts an instance's machine and marks it running.
func (s *Server) boot(in *instance) {
	var m cloudsim.Machine
	s.mu.Lock()
	noBoot := s.noBoot
	s.mu.Unlock()
	if s.opts.Runner != nil && len(in.UserData) > 0 && !noBoot {
		var err error
		m, err = s.opts.Runner.Boot(in.ID, in.UserData)
		if err != nil {
			s.log.Warn("ec2sim: the instance's machine did not boot", "instance", in.ID, "err", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.State != "pending" && in.State != "running" {
		// Terminated while booting.
		go s.stop(m)
		return
	}
	in.machine, in.State = m, "running"
	s.saveLocked()
}

func (s *Server) stop(m cloudsim.Machine) {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		s.log.Warn("ec2sim: stopping a machine", "err", err)
	}
}

func zoneOK(zones []string, z string) bool {
	for _, x := range zones {
		if x == z {
			return true
		}
	}
	return false
}

func (s *Server) offered(region, typ string) bool {
	r := s.opts.Regions[region]
	if len(r.InstanceTypes) == 0 {
		return s.catalogType(typ) != nil
	}
	for _, t := range r.InstanceTypes {
		if t == typ {
			return true
		}
	}
	return false
}

func (s *Server) catalogType(name string) *InstanceType {
	for i := range s.opts.Catalog {
		if s.opts.Catalog[i].Name == name {
			return &s.opts.Catalog[i]
		}
	}
	return nil
}

func strIn(s string, list []string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// WriteProfile writes an AWS shared config file and credentials file in
// dir with a profile that points the SDK at this endpoint (endpoint_url)
// with its credentials, as an operator would for a private endpoint. It
// returns the two files' paths.
func (s *Server) WriteProfile(dir, profile, region string) (configFile, credentialsFile string, err error) {
	configFile = filepath.Join(dir, "aws-config")
	credentialsFile = filepath.Join(dir, "aws-credentials")
	cfg := fmt.Sprintf("[profile %s]\nregion = %s\nendpoint_url = %s\n", profile, region, s.URL())
	creds := fmt.Sprintf("[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n", profile, s.opts.AccessKeyID, s.opts.SecretAccessKey)
	if err := os.WriteFile(configFile, []byte(cfg), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(credentialsFile, []byte(creds), 0o600); err != nil {
		return "", "", err
	}
	return configFile, credentialsFile, nil
}
