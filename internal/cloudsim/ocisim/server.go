// Package ocisim is test equipment: a local endpoint speaking the OCI REST
// API the oci provider uses — LaunchInstance, GetInstance, ListInstances,
// UpdateInstance, TerminateInstance, ListShapes (core, 20160918) and
// ListAvailabilityDomains (identity) — as JSON with OCI's error shapes,
// every request's signature verified against the test key, opc-retry-token
// idempotency, and faults a test can turn on (429 throttling, "Out of
// host capacity"). Each region is served on a listener of its own, as
// each OCI region has its own endpoint; the oci provider reaches it
// through the OCI Go SDK by the SDK's endpoint override and an OCI config
// file (WriteConfig), exactly as it reaches OCI.
//
// Its instances boot the worker from their user data (metadata user_data)
// through a cloudsim.Runner. State is in memory, and in StateFile when
// given.
package ocisim

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/atomicfile"
	"github.com/norsk-go/norsk-manager/internal/cloudsim"
)

// Default identities of the endpoint.
const (
	DefaultTenancy = "ocid1.tenancy.oc1..aaaaaaaanorskcloudsimtenancy"
	DefaultUser    = "ocid1.user.oc1..aaaaaaaanorskcloudsimuser"
)

// Shape is one shape of the endpoint's catalog.
type Shape struct {
	Name        string  `json:"shape"`
	OCPUs       float32 `json:"ocpus"`
	MemoryGBs   float32 `json:"memoryInGBs"`
	Processor   string  `json:"processorDescription"`
	Flexible    bool    `json:"isFlexible"`
	GPUs        int     `json:"gpus"`
	MaxOCPUs    float32 `json:"-"`
	MaxMemoryGB float32 `json:"-"`
}

// DefaultShapes is a small catalog of real OCI shapes.
var DefaultShapes = []Shape{
	{Name: "VM.Standard2.1", OCPUs: 1, MemoryGBs: 15, Processor: "2.0 GHz Intel® Xeon® Platinum 8167M (Skylake)"},
	{Name: "VM.Standard2.2", OCPUs: 2, MemoryGBs: 30, Processor: "2.0 GHz Intel® Xeon® Platinum 8167M (Skylake)"},
	{Name: "VM.Standard2.4", OCPUs: 4, MemoryGBs: 60, Processor: "2.0 GHz Intel® Xeon® Platinum 8167M (Skylake)"},
	{Name: "VM.Standard.E4.Flex", OCPUs: 1, MemoryGBs: 16, Processor: "2.55 GHz AMD EPYC™ 7J13 (Milan)", Flexible: true, MaxOCPUs: 64, MaxMemoryGB: 1024},
	{Name: "VM.Standard.A1.Flex", OCPUs: 1, MemoryGBs: 6, Processor: "3.0 GHz Ampere® Altra™", Flexible: true, MaxOCPUs: 80, MaxMemoryGB: 512},
	{Name: "VM.GPU.A10.1", OCPUs: 15, MemoryGBs: 240, Processor: "2.6 GHz Intel® Xeon® Platinum 8358 (Ice Lake)", GPUs: 1},
}

// Region is one region of the endpoint.
type Region struct {
	// AvailabilityDomains (default: three, "Uocm:<REGION>-AD-n").
	AvailabilityDomains []string
	// Shapes are the catalog shapes offered in every domain (default:
	// all).
	Shapes []string
}

// Options configure a Server.
type Options struct {
	// Regions it serves (default: eu-frankfurt-1), each on its own
	// listener.
	Regions map[string]Region
	// Shapes is its catalog (default DefaultShapes).
	Shapes []Shape
	// Tenancy and User identify the API key; Key is its private key (a new
	// 2048-bit key when nil). Requests must be signed with it.
	Tenancy, User string
	Key           *rsa.PrivateKey
	// Runner boots instances' machines (nil: instances run nothing).
	Runner    cloudsim.Runner
	StateFile string
	Logger    *slog.Logger
}

// instance is an instance's record, in OCI's JSON.
type instance struct {
	ID                 string            `json:"id"`
	AvailabilityDomain string            `json:"availabilityDomain"`
	CompartmentID      string            `json:"compartmentId"`
	DisplayName        string            `json:"displayName"`
	FaultDomain        string            `json:"faultDomain"`
	LifecycleState     string            `json:"lifecycleState"`
	Region             string            `json:"region"`
	Shape              string            `json:"shape"`
	ImageID            string            `json:"imageId"`
	TimeCreated        string            `json:"timeCreated"`
	FreeformTags       map[string]string `json:"freeformTags"`
	DefinedTags        map[string]any    `json:"definedTags"`
	Metadata           map[string]string `json:"metadata"`
	ShapeConfig        shapeConfig       `json:"shapeConfig"`
	SourceDetails      sourceDetails     `json:"sourceDetails"`
	LaunchMode         string            `json:"launchMode"`

	retryToken string
	requestSum string
	subnet     string
	etag       int
	machine    cloudsim.Machine
}

type shapeConfig struct {
	OCPUs     float32 `json:"ocpus"`
	MemoryGBs float32 `json:"memoryInGBs"`
	VCPUs     int     `json:"vcpus"`
}

type sourceDetails struct {
	SourceType string `json:"sourceType"`
	ImageID    string `json:"imageId"`
}

// stored is an instance in the state file.
type stored struct {
	instance
	RetryToken string `json:"retryToken"`
	RequestSum string `json:"requestSum"`
	Subnet     string `json:"subnet"`
}

// Server is a running OCI endpoint.
type Server struct {
	opts        Options
	log         *slog.Logger
	fingerprint string
	listeners   map[string]net.Listener
	servers     []*http.Server

	mu        sync.Mutex
	instances map[string]*instance
	order     []string
	tokens    map[string]string
	calls     map[string]int
	// Faults are the faults a test injects (Throttle, NoCapacity).
	cloudsim.Faults
	wg sync.WaitGroup
}

// Start serves the endpoint (one listener per region) until Close.
func Start(opts Options) (*Server, error) {
	if len(opts.Regions) == 0 {
		opts.Regions = map[string]Region{"eu-frankfurt-1": {}}
	}
	for name, r := range opts.Regions {
		if len(r.AvailabilityDomains) == 0 {
			for i := 1; i <= 3; i++ {
				r.AvailabilityDomains = append(r.AvailabilityDomains, fmt.Sprintf("Uocm:%s-AD-%d", strings.ToUpper(name), i))
			}
			opts.Regions[name] = r
		}
	}
	if len(opts.Shapes) == 0 {
		opts.Shapes = DefaultShapes
	}
	if opts.Tenancy == "" {
		opts.Tenancy = DefaultTenancy
	}
	if opts.User == "" {
		opts.User = DefaultUser
	}
	if opts.Key == nil {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		opts.Key = k
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	der, err := x509.MarshalPKIXPublicKey(&opts.Key.PublicKey)
	if err != nil {
		return nil, err
	}
	sum := md5.Sum(der)
	var fp []string
	for _, b := range sum {
		fp = append(fp, fmt.Sprintf("%02x", b))
	}
	s := &Server{opts: opts, log: opts.Logger.With("component", "ocisim"), fingerprint: strings.Join(fp, ":"),
		listeners: map[string]net.Listener{}, instances: map[string]*instance{}, tokens: map[string]string{},
		calls: map[string]int{}}
	if err := s.load(); err != nil {
		return nil, err
	}
	for _, region := range s.Regions() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.listeners[region] = ln
		srv := &http.Server{Handler: s.handler(region), ReadHeaderTimeout: 10 * time.Second}
		s.servers = append(s.servers, srv)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = srv.Serve(ln)
		}()
	}
	s.rebootAll()
	return s, nil
}

// Regions are the regions served, sorted.
func (s *Server) Regions() []string {
	out := make([]string, 0, len(s.opts.Regions))
	for r := range s.opts.Regions {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// URL is region's endpoint (the oci provider's regions.<r>.endpoint).
func (s *Server) URL(region string) string {
	ln, ok := s.listeners[region]
	if !ok {
		return ""
	}
	return "http://" + ln.Addr().String()
}

// AvailabilityDomains are region's domains.
func (s *Server) AvailabilityDomains(region string) []string {
	return append([]string(nil), s.opts.Regions[region].AvailabilityDomains...)
}

// KeyID is the keyId requests are signed with.
func (s *Server) KeyID() string { return s.opts.Tenancy + "/" + s.opts.User + "/" + s.fingerprint }

// WriteConfig writes an OCI config file (and the API key it names) in dir
// with profile, as `oci setup config` would for this endpoint's user; it
// returns the config file's path.
func (s *Server) WriteConfig(dir, profile string) (string, error) {
	keyFile := filepath.Join(dir, "oci_api_key.pem")
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(s.opts.Key)})
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", err
	}
	region := s.Regions()[0]
	conf := fmt.Sprintf("[%s]\nuser=%s\nfingerprint=%s\nkey_file=%s\ntenancy=%s\nregion=%s\n", profile, s.opts.User, s.fingerprint, keyFile, s.opts.Tenancy, region)
	path := filepath.Join(dir, "oci-config")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// Close stops serving and stops every machine.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range s.servers {
		_ = srv.Shutdown(ctx)
	}
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
	return nil
}

// ociError is an OCI error answer.
type ociError struct {
	status int
	Code   string `json:"code"`
	Msg    string `json:"message"`
}

func writeJSON(w http.ResponseWriter, reqID string, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("opc-request-id", reqID)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

func newOCID(kind, region string) string {
	b := make([]byte, 30)
	_, _ = rand.Read(b)
	return fmt.Sprintf("ocid1.%s.oc1.%s.%s", kind, region, strings.ToLower(base32(b))[:60])
}

func base32(b []byte) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	var sb strings.Builder
	for _, c := range b {
		sb.WriteByte(alphabet[c%32])
		sb.WriteByte(alphabet[(c/32)%32])
	}
	return sb.String()
}

// handler serves one region's endpoint.
func (s *Server) handler(region string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqID := newRequestID()
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			writeJSON(w, reqID, http.StatusBadRequest, ociError{Code: "InvalidParameter", Msg: err.Error()})
			return
		}
		if err := verifySignature(r, body, s.KeyID(), &s.opts.Key.PublicKey, time.Now()); err != nil {
			writeJSON(w, reqID, http.StatusUnauthorized, ociError{Code: "NotAuthenticated", Msg: "The required information to complete authentication was not provided or was incorrect: " + err.Error()})
			return
		}
		op, id := route(r)
		s.mu.Lock()
		s.calls[op]++
		throttled := s.TakeThrottle()
		s.mu.Unlock()
		if throttled {
			writeJSON(w, reqID, http.StatusTooManyRequests, ociError{Code: "TooManyRequests", Msg: "Too many requests for the user"})
			return
		}
		var out any
		var oe *ociError
		hdr := http.Header{}
		switch op {
		case "LaunchInstance":
			out, oe = s.launch(region, r, body, hdr)
		case "GetInstance":
			out, oe = s.get(region, id, hdr)
		case "ListInstances":
			out, oe = s.list(region, r, hdr)
		case "UpdateInstance":
			out, oe = s.update(region, id, r, body, hdr)
		case "TerminateInstance":
			oe = s.terminate(region, id)
		case "ListShapes":
			out, oe = s.shapes(region, r)
		case "ListAvailabilityDomains":
			out, oe = s.domains(region, r)
		default:
			oe = &ociError{status: http.StatusNotFound, Code: "NotFound", Msg: fmt.Sprintf("%s %s is not an operation of this endpoint", r.Method, r.URL.Path)}
		}
		if oe != nil {
			writeJSON(w, reqID, oe.status, oe)
			return
		}
		for k, v := range hdr {
			w.Header()[k] = v
		}
		if out == nil {
			w.Header().Set("opc-request-id", reqID)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, reqID, http.StatusOK, out)
	})
}

// route names the operation of a request, and the instance it names.
func route(r *http.Request) (string, string) {
	p := strings.TrimPrefix(r.URL.Path, "/20160918")
	switch {
	case p == "/instances" && r.Method == http.MethodPost:
		return "LaunchInstance", ""
	case p == "/instances" && r.Method == http.MethodGet:
		return "ListInstances", ""
	case strings.HasPrefix(p, "/instances/") && !strings.Contains(p[len("/instances/"):], "/"):
		id := p[len("/instances/"):]
		switch r.Method {
		case http.MethodGet:
			return "GetInstance", id
		case http.MethodPut:
			return "UpdateInstance", id
		case http.MethodDelete:
			return "TerminateInstance", id
		}
	case p == "/shapes" && r.Method == http.MethodGet:
		return "ListShapes", ""
	case p == "/availabilityDomains" && r.Method == http.MethodGet:
		return "ListAvailabilityDomains", ""
	}
	return "", ""
}

func (s *Server) compartmentOK(c string) bool { return c == s.opts.Tenancy }

func notFound(what, id string) *ociError {
	return &ociError{status: http.StatusNotFound, Code: "NotAuthorizedOrNotFound", Msg: fmt.Sprintf("Authorization failed or requested resource not found: %s %s", what, id)}
}

func invalid(msg string) *ociError {
	return &ociError{status: http.StatusBadRequest, Code: "InvalidParameter", Msg: msg}
}

// launchDetails is LaunchInstanceDetails as the endpoint reads it.
type launchDetails struct {
	AvailabilityDomain string            `json:"availabilityDomain"`
	CompartmentID      string            `json:"compartmentId"`
	DisplayName        string            `json:"displayName"`
	Shape              string            `json:"shape"`
	FreeformTags       map[string]string `json:"freeformTags"`
	Metadata           map[string]string `json:"metadata"`
	SourceDetails      *sourceDetails    `json:"sourceDetails"`
	ImageID            string            `json:"imageId"`
	SubnetID           string            `json:"subnetId"`
	CreateVnicDetails  *struct {
		SubnetID string `json:"subnetId"`
	} `json:"createVnicDetails"`
	ShapeConfig *struct {
		OCPUs     float32 `json:"ocpus"`
		MemoryGBs float32 `json:"memoryInGBs"`
	} `json:"shapeConfig"`
}

func (s *Server) shape(name string) *Shape {
	for i := range s.opts.Shapes {
		if s.opts.Shapes[i].Name == name {
			return &s.opts.Shapes[i]
		}
	}
	return nil
}

func (s *Server) offered(region, name string) bool {
	r := s.opts.Regions[region]
	if len(r.Shapes) == 0 {
		return s.shape(name) != nil
	}
	for _, x := range r.Shapes {
		if x == name {
			return true
		}
	}
	return false
}

func (s *Server) launch(region string, r *http.Request, body []byte, hdr http.Header) (any, *ociError) {
	var d launchDetails
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, invalid("the request body is not LaunchInstanceDetails: " + err.Error())
	}
	image := d.ImageID
	if d.SourceDetails != nil {
		if d.SourceDetails.SourceType != "image" {
			return nil, invalid(fmt.Sprintf("sourceDetails.sourceType %q: this endpoint boots images", d.SourceDetails.SourceType))
		}
		image = d.SourceDetails.ImageID
	}
	subnet := d.SubnetID
	if d.CreateVnicDetails != nil && d.CreateVnicDetails.SubnetID != "" {
		subnet = d.CreateVnicDetails.SubnetID
	}
	ads := s.opts.Regions[region].AvailabilityDomains
	sh := s.shape(d.Shape)
	switch {
	case !s.compartmentOK(d.CompartmentID):
		return nil, notFound("compartment", d.CompartmentID)
	case !contains(ads, d.AvailabilityDomain):
		return nil, invalid(fmt.Sprintf("availabilityDomain %q is not a domain of %s", d.AvailabilityDomain, region))
	case sh == nil || !s.offered(region, d.Shape):
		return nil, invalid(fmt.Sprintf("Shape %s is not valid for image %s", d.Shape, image))
	case !strings.HasPrefix(image, "ocid1.image."):
		return nil, invalid(fmt.Sprintf("imageId %q is not an image OCID", image))
	case subnet != "" && !strings.HasPrefix(subnet, "ocid1.subnet."):
		return nil, notFound("subnet", subnet)
	case d.ShapeConfig != nil && !sh.Flexible:
		return nil, invalid(fmt.Sprintf("shapeConfig is only for flexible shapes, not %s", d.Shape))
	}
	cfg := shapeConfig{OCPUs: sh.OCPUs, MemoryGBs: sh.MemoryGBs}
	if d.ShapeConfig != nil {
		if d.ShapeConfig.OCPUs > 0 {
			if d.ShapeConfig.OCPUs > sh.MaxOCPUs {
				return nil, invalid(fmt.Sprintf("shapeConfig.ocpus %v is more than %s allows (%v)", d.ShapeConfig.OCPUs, d.Shape, sh.MaxOCPUs))
			}
			cfg.OCPUs = d.ShapeConfig.OCPUs
		}
		if d.ShapeConfig.MemoryGBs > 0 {
			cfg.MemoryGBs = d.ShapeConfig.MemoryGBs
		}
	}
	cfg.VCPUs = int(cfg.OCPUs * 2)
	if strings.Contains(d.Shape, ".A1.") {
		cfg.VCPUs = int(cfg.OCPUs)
	}
	var userData []byte
	if ud := d.Metadata["user_data"]; ud != "" {
		b, err := base64.StdEncoding.DecodeString(ud)
		if err != nil {
			return nil, invalid("metadata.user_data must be base64")
		}
		userData = b
	}
	sum := sha256.Sum256([]byte(d.AvailabilityDomain + "\x00" + d.Shape + "\x00" + image))
	reqSum := hex.EncodeToString(sum[:])
	token := r.Header.Get("opc-retry-token")
	s.mu.Lock()
	defer s.mu.Unlock()
	if token != "" {
		if id, ok := s.tokens[region+"/"+token]; ok {
			in := s.instances[id]
			if in.requestSum != reqSum {
				return nil, &ociError{status: http.StatusConflict, Code: "IncorrectState", Msg: "The retry token was used for a different request"}
			}
			hdr.Set("etag", strconv.Itoa(in.etag))
			return in, nil
		}
	}
	if s.TakeNoCapacity(d.Shape, d.AvailabilityDomain) {
		return nil, &ociError{status: http.StatusInternalServerError, Code: "InternalError", Msg: "Out of host capacity."}
	}
	in := &instance{
		ID: newOCID("instance", region), AvailabilityDomain: d.AvailabilityDomain, CompartmentID: d.CompartmentID, DisplayName: d.DisplayName,
		FaultDomain: "FAULT-DOMAIN-1", LifecycleState: "PROVISIONING", Region: region, Shape: d.Shape, ImageID: image,
		TimeCreated: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), FreeformTags: d.FreeformTags, DefinedTags: map[string]any{},
		Metadata: d.Metadata, ShapeConfig: cfg, SourceDetails: sourceDetails{SourceType: "image", ImageID: image}, LaunchMode: "PARAVIRTUALIZED",
		retryToken: token, requestSum: reqSum, subnet: subnet, etag: 1,
	}
	if in.FreeformTags == nil {
		in.FreeformTags = map[string]string{}
	}
	s.instances[in.ID] = in
	s.order = append(s.order, in.ID)
	if token != "" {
		s.tokens[region+"/"+token] = in.ID
	}
	s.saveLocked()
	out := *in
	hdr.Set("etag", strconv.Itoa(in.etag))
	s.log.Info("ocisim: instance launched", "instance", in.ID, "domain", in.AvailabilityDomain, "shape", in.Shape)
	go s.boot(in, userData)
	return &out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Server) get(region, id string, hdr http.Header) (any, *ociError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok || in.Region != region {
		return nil, notFound("instance", id)
	}
	hdr.Set("etag", strconv.Itoa(in.etag))
	out := *in
	return &out, nil
}

func (s *Server) list(region string, r *http.Request, hdr http.Header) (any, *ociError) {
	q := r.URL.Query()
	if !s.compartmentOK(q.Get("compartmentId")) {
		return nil, notFound("compartment", q.Get("compartmentId"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sel := []instance{} // OCI answers an empty list as [], never null
	for _, id := range s.order {
		in := s.instances[id]
		if in.Region != region {
			continue
		}
		if ad := q.Get("availabilityDomain"); ad != "" && ad != in.AvailabilityDomain {
			continue
		}
		if st := q.Get("lifecycleState"); st != "" && st != in.LifecycleState {
			continue
		}
		sel = append(sel, *in)
	}
	from, to, next, oe := page(len(sel), q.Get("page"), q.Get("limit"))
	if oe != nil {
		return nil, oe
	}
	if next != "" {
		hdr.Set("opc-next-page", next)
	}
	return sel[from:to], nil
}

// page is the [from, to) of a page (page: an offset; limit default 100).
func page(n int, p, limit string) (int, int, string, *ociError) {
	from, size := 0, 100
	if p != "" {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v > n {
			return 0, 0, "", invalid("invalid page token")
		}
		from = v
	}
	if limit != "" {
		v, err := strconv.Atoi(limit)
		if err != nil || v < 1 || v > 1000 {
			return 0, 0, "", invalid("limit must be 1 to 1000")
		}
		size = v
	}
	to := min(n, from+size)
	next := ""
	if to < n {
		next = strconv.Itoa(to)
	}
	return from, to, next, nil
}

func (s *Server) update(region, id string, r *http.Request, body []byte, hdr http.Header) (any, *ociError) {
	var d struct {
		DisplayName  *string           `json:"displayName"`
		FreeformTags map[string]string `json:"freeformTags"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, invalid("the request body is not UpdateInstanceDetails: " + err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok || in.Region != region {
		return nil, notFound("instance", id)
	}
	if m := r.Header.Get("if-match"); m != "" && m != strconv.Itoa(in.etag) {
		return nil, &ociError{status: http.StatusPreconditionFailed, Code: "NoEtagMatch", Msg: "The resource has changed since you read it"}
	}
	if in.LifecycleState == "TERMINATED" {
		return nil, &ociError{status: http.StatusConflict, Code: "IncorrectState", Msg: "The instance is terminated"}
	}
	if d.FreeformTags != nil {
		in.FreeformTags = d.FreeformTags
	}
	if d.DisplayName != nil {
		in.DisplayName = *d.DisplayName
	}
	in.etag++
	s.saveLocked()
	hdr.Set("etag", strconv.Itoa(in.etag))
	out := *in
	return &out, nil
}

func (s *Server) terminate(region, id string) *ociError {
	s.mu.Lock()
	in, ok := s.instances[id]
	if !ok || in.Region != region {
		s.mu.Unlock()
		return notFound("instance", id)
	}
	m := s.terminateLocked(in)
	s.mu.Unlock()
	go s.stop(m)
	return nil
}

func (s *Server) terminateLocked(in *instance) cloudsim.Machine {
	if in.LifecycleState == "TERMINATED" {
		return nil
	}
	m := in.machine
	in.machine, in.LifecycleState = nil, "TERMINATED"
	in.etag++
	s.saveLocked()
	s.log.Info("ocisim: instance terminated", "instance", in.ID)
	return m
}

type shapeJSON struct {
	Shape       string  `json:"shape"`
	OCPUs       float32 `json:"ocpus"`
	MemoryGBs   float32 `json:"memoryInGBs"`
	Processor   string  `json:"processorDescription"`
	IsFlexible  bool    `json:"isFlexible"`
	Gpus        int     `json:"gpus"`
	OcpuOptions *struct {
		Min float32 `json:"min"`
		Max float32 `json:"max"`
	} `json:"ocpuOptions,omitempty"`
}

func (s *Server) shapes(region string, r *http.Request) (any, *ociError) {
	q := r.URL.Query()
	if !s.compartmentOK(q.Get("compartmentId")) {
		return nil, notFound("compartment", q.Get("compartmentId"))
	}
	if ad := q.Get("availabilityDomain"); ad != "" && !contains(s.opts.Regions[region].AvailabilityDomains, ad) {
		return nil, invalid(fmt.Sprintf("availabilityDomain %q is not a domain of %s", ad, region))
	}
	out := []shapeJSON{}
	for _, sh := range s.opts.Shapes {
		if !s.offered(region, sh.Name) {
			continue
		}
		j := shapeJSON{Shape: sh.Name, OCPUs: sh.OCPUs, MemoryGBs: sh.MemoryGBs, Processor: sh.Processor, IsFlexible: sh.Flexible, Gpus: sh.GPUs}
		if sh.Flexible {
			j.OcpuOptions = &struct {
				Min float32 `json:"min"`
				Max float32 `json:"max"`
			}{1, sh.MaxOCPUs}
		}
		out = append(out, j)
	}
	return out, nil
}

func (s *Server) domains(region string, r *http.Request) (any, *ociError) {
	q := r.URL.Query()
	if !s.compartmentOK(q.Get("compartmentId")) {
		return nil, notFound("compartment", q.Get("compartmentId"))
	}
	type ad struct {
		Name          string `json:"name"`
		ID            string `json:"id"`
		CompartmentID string `json:"compartmentId"`
	}
	out := []ad{}
	for i, name := range s.opts.Regions[region].AvailabilityDomains {
		out = append(out, ad{Name: name, ID: fmt.Sprintf("ocid1.availabilitydomain.oc1..ad%d%s", i+1, strings.ReplaceAll(region, "-", "")), CompartmentID: s.opts.Tenancy})
	}
	return out, nil
}

// boot starts an instance's machine and marks it running.
func (s *Server) boot(in *instance, userData []byte) {
	var m cloudsim.Machine
	if s.opts.Runner != nil && len(userData) > 0 {
		var err error
		if m, err = s.opts.Runner.Boot(in.ID[len(in.ID)-12:], userData); err != nil {
			s.log.Warn("ocisim: the instance's machine did not boot", "instance", in.ID, "err", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.LifecycleState != "PROVISIONING" && in.LifecycleState != "RUNNING" {
		go s.stop(m)
		return
	}
	in.machine, in.LifecycleState = m, "RUNNING"
	in.etag++
	s.saveLocked()
}

func (s *Server) stop(m cloudsim.Machine) {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = m.Stop(ctx)
}

// Faults and observations, for tests.

// Calls is how many calls of op were made.
func (s *Server) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Instance is an instance as a test sees it.
type Instance struct {
	ID, Region, Domain, Shape, Image, State string
	Tags                                    map[string]string
	UserData                                []byte
}

// Instances lists every instance, in launch order.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Instance
	for _, id := range s.order {
		in := s.instances[id]
		tags := map[string]string{}
		for k, v := range in.FreeformTags {
			tags[k] = v
		}
		ud, _ := base64.StdEncoding.DecodeString(in.Metadata["user_data"])
		out = append(out, Instance{ID: in.ID, Region: in.Region, Domain: in.AvailabilityDomain, Shape: in.Shape, Image: in.ImageID,
			State: in.LifecycleState, Tags: tags, UserData: ud})
	}
	return out
}

// Running lists the instances not terminated.
func (s *Server) Running() []Instance {
	var out []Instance
	for _, in := range s.Instances() {
		if in.State != "TERMINATED" && in.State != "TERMINATING" {
			out = append(out, in)
		}
	}
	return out
}

// TerminateOutOfBand terminates an instance as someone else would.
func (s *Server) TerminateOutOfBand(id string) error {
	s.mu.Lock()
	in, ok := s.instances[id]
	if !ok {
		s.mu.Unlock()
		return errors.New("ocisim: no such instance")
	}
	m := s.terminateLocked(in)
	s.mu.Unlock()
	s.stop(m)
	return nil
}

// State file.

type stateFile struct {
	Instances []stored `json:"instances"`
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
		return fmt.Errorf("ocisim: state file: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("ocisim: state file %s: %w", s.opts.StateFile, err)
	}
	for _, sd := range st.Instances {
		in := sd.instance
		in.retryToken, in.requestSum, in.subnet = sd.RetryToken, sd.RequestSum, sd.Subnet
		s.instances[in.ID] = &in
		s.order = append(s.order, in.ID)
		if in.retryToken != "" {
			s.tokens[in.Region+"/"+in.retryToken] = in.ID
		}
	}
	return nil
}

func (s *Server) saveLocked() {
	if s.opts.StateFile == "" {
		return
	}
	var st stateFile
	for _, id := range s.order {
		in := s.instances[id]
		st.Instances = append(st.Instances, stored{instance: *in, RetryToken: in.retryToken, RequestSum: in.requestSum, Subnet: in.subnet})
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err == nil {
		err = atomicfile.WriteFile(s.opts.StateFile, b, 0o600)
	}
	if err != nil {
		s.log.Warn("ocisim: could not save the state file", "err", err)
	}
}

func (s *Server) rebootAll() {
	s.mu.Lock()
	var boot []*instance
	for _, id := range s.order {
		if in := s.instances[id]; in.LifecycleState == "PROVISIONING" || in.LifecycleState == "RUNNING" {
			boot = append(boot, in)
		}
	}
	s.mu.Unlock()
	for _, in := range boot {
		ud, _ := base64.StdEncoding.DecodeString(in.Metadata["user_data"])
		s.boot(in, ud)
	}
}
