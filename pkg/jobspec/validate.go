// Package jobspec holds every rule the Manager's API applies to a caller's
// input beyond the field bounds (decision 0025): job specifications and
// bundles (and how a bundle expands into its replica jobs), ids, roles,
// tags, pools, search filters, starts, KV commits, audit appends and
// queries, tokens, discovery fleets and rotations, drain and migration
// records and requests, image references and the cloud calls' required
// fields. Every refusal is an apierr InvalidArgument naming the field by its
// API (JSON) path, so a user reading the error knows which line of their
// spec to fix.
//
// It is public (decision 0045) so that the Manager's handlers and the SDK's
// fake Manager (sdk/norsk/norsktest) refuse the same input with the same
// error, from one copy of the rules. The package is pure (no I/O, no clock).
// The FSM does not call the validators: a command is validated once, where it
// enters (decision 0046); the FSM uses only the expansion helpers (bundle
// jobs, slots), which must stay as they are for stored data.
package jobspec

import (
	"fmt"
	"math"
	"net"
	"path"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Limits on a job specification.
const (
	MaxJobIDLen       = 128
	MaxDescriptionLen = 4096
	MaxTags           = 256
	MaxTagKeyLen      = 253
	MaxTagValueLen    = 1024
	MaxServices       = 64
	MaxServiceNameLen = 63
	MaxRoleLen        = 64
	MaxEnv            = 512
	MaxEnvValueLen    = 32 * 1024
	MaxPorts          = 256
	MaxArgs           = 1024
	MaxVolumes        = 64
)

var (
	idRE          = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	serviceNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	roleRE        = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]*$`)
	tagKeyRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
	envNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	volumeNameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
)

// ValidateID checks a job or node id; field names it in errors.
func ValidateID(field, id string) error {
	switch {
	case id == "":
		return apierr.Invalid(field, "must not be empty")
	case len(id) > MaxJobIDLen:
		return apierr.Invalid(field, "is %d characters long (at most %d)", len(id), MaxJobIDLen)
	case !idRE.MatchString(id):
		return apierr.Invalid(field, "%s: use letters, digits, '.', '_' and '-', starting with a letter or digit", apierr.Quote(id))
	}
	return nil
}

// ValidateRole checks an instance role ("primary", "backup", "primary@3f9c1e2a").
func ValidateRole(field, role string) error {
	switch {
	case role == "":
		return apierr.Invalid(field, "must not be empty")
	case len(role) > MaxRoleLen:
		return apierr.Invalid(field, "is %d characters long (at most %d)", len(role), MaxRoleLen)
	case !roleRE.MatchString(role):
		return apierr.Invalid(field, "%s: use letters, digits, '.', '_', '@' and '-', starting with a letter or digit", apierr.Quote(role))
	}
	return nil
}

// ValidateTags checks a tag map; field is its path.
func ValidateTags(field string, tags map[string]string) error {
	if len(tags) > MaxTags {
		return apierr.Invalid(field, "has %d tags (at most %d)", len(tags), MaxTags)
	}
	for _, k := range sortedKeys(tags) {
		v := tags[k]
		switch {
		case len(k) > MaxTagKeyLen || !tagKeyRE.MatchString(k):
			return apierr.Invalid(field, "tag name %s: use 1-%d letters, digits, '.', '_', '/' and '-'", apierr.Quote(k), MaxTagKeyLen)
		case len(v) > MaxTagValueLen:
			return apierr.Invalid(field+"."+k, "value is %d bytes (at most %d)", len(v), MaxTagValueLen)
		case !printable(v):
			return apierr.Invalid(field+"."+k, "value must be printable UTF-8 (no control characters)")
		}
	}
	return nil
}

// ValidateNodeTags checks SetNodeTags' tags: at least one, each valid.
func ValidateNodeTags(tags map[string]string) error {
	if len(tags) == 0 {
		return apierr.Invalid("tags", "give at least one tag to set")
	}
	return ValidateTags("tags", tags)
}

// ValidateIdleExpiry checks SetNodeIdleExpiry's value (0 clears it).
func ValidateIdleExpiry(ms int64) error {
	if ms < 0 {
		return apierr.Invalid("idleExpiryMs", "%d must not be negative (0 clears the override)", ms)
	}
	return nil
}

// ValidatePool checks a pool name (a tag value; "" = no pool).
func ValidatePool(field, pool string) error {
	if len(pool) > MaxTagValueLen || !printable(pool) {
		return apierr.Invalid(field, "%s: use at most %d printable characters", apierr.Quote(pool), MaxTagValueLen)
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// ValidateJob checks a job specification as CreateJob and UpdateJob receive
// it. Fields the Manager owns (state, terminal state) are not checked; the
// caller ignores them.
func ValidateJob(job *managerv1.Job) error {
	if job == nil {
		return apierr.Invalid("job", "is required")
	}
	if err := ValidateID("job.jobId", job.GetJobId()); err != nil {
		return err
	}
	if len(job.GetDescription()) > MaxDescriptionLen {
		return apierr.Invalid("job.description", "is %d bytes (at most %d)", len(job.GetDescription()), MaxDescriptionLen)
	}
	if err := ValidateTags("job.tags", job.GetTags()); err != nil {
		return err
	}
	if ts := job.GetStartDateTime(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return apierr.Invalid("job.startDateTime", "%v", err)
		}
	}
	volumes := map[string]bool{}
	if len(job.GetVolumes()) > MaxVolumes {
		return apierr.Invalid("job.volumes", "has %d volumes (at most %d)", len(job.GetVolumes()), MaxVolumes)
	}
	for i, v := range job.GetVolumes() {
		f := fmt.Sprintf("job.volumes[%d]", i)
		if len(v) > 63 || !volumeNameRE.MatchString(v) {
			return apierr.Invalid(f, "%s: use 1-63 lower-case letters, digits, '.', '_' and '-'", apierr.Quote(v))
		}
		if volumes[v] {
			return apierr.Invalid(f, "duplicate volume %s", apierr.Quote(v))
		}
		volumes[v] = true
	}
	services := job.GetServices()
	if len(services) == 0 {
		return apierr.Invalid("job.services", "a job needs at least one service")
	}
	if len(services) > MaxServices {
		return apierr.Invalid("job.services", "has %d services (at most %d)", len(services), MaxServices)
	}
	index := map[string]int{}
	for i, s := range services {
		f := fmt.Sprintf("job.services[%d]", i)
		if s == nil {
			return apierr.Invalid(f, "is empty")
		}
		name := s.GetName()
		switch {
		case name == "":
			return apierr.Invalid(f+".name", "must not be empty")
		case len(name) > MaxServiceNameLen || !serviceNameRE.MatchString(name):
			return apierr.Invalid(f+".name", "%s: use 1-%d lower-case letters, digits and '-', starting with a letter or digit", apierr.Quote(name), MaxServiceNameLen)
		}
		if j, dup := index[name]; dup {
			return apierr.Invalid(f+".name", "duplicate service name %s (also job.services[%d])", apierr.Quote(name), j)
		}
		index[name] = i
		if err := validateService(f, s, volumes); err != nil {
			return err
		}
	}
	for i, s := range services {
		for j, d := range s.GetDependsOn() {
			f := fmt.Sprintf("job.services[%d].dependsOn[%d]", i, j)
			if d == s.GetName() {
				return apierr.Invalid(f, "service %s depends on itself", apierr.Quote(d))
			}
			if _, ok := index[d]; !ok {
				return apierr.Invalid(f, "no service named %s in this job", apierr.Quote(d))
			}
		}
	}
	if cycle := dependencyCycle(services); cycle != nil {
		return apierr.Invalid("job.services", "dependsOn has a cycle: %s", strings.Join(cycle, " → "))
	}
	if ap := job.GetAutoPlacement(); ap != nil {
		if err := validateRequirements("job.autoPlacement.requirements", ap.GetRequirements()); err != nil {
			return err
		}
	}
	return nil
}

func validateService(f string, s *managerv1.Service, volumes map[string]bool) error {
	if s.GetImage() == "" && len(s.GetCommand()) == 0 {
		return apierr.Invalid(f, "needs an image (docker runtime) or a command (process runtime)")
	}
	if strings.ContainsAny(s.GetImage(), " \t\n\x00") {
		return apierr.Invalid(f+".image", "%s is not an image reference", apierr.Quote(s.GetImage()))
	}
	if len(s.GetCommand())+len(s.GetArgs()) > MaxArgs {
		return apierr.Invalid(f+".args", "too many arguments (at most %d)", MaxArgs)
	}
	for i, c := range s.GetCommand() {
		if strings.ContainsRune(c, 0) {
			return apierr.Invalid(fmt.Sprintf("%s.command[%d]", f, i), "contains a NUL byte")
		}
	}
	for i, a := range s.GetArgs() {
		if strings.ContainsRune(a, 0) {
			return apierr.Invalid(fmt.Sprintf("%s.args[%d]", f, i), "contains a NUL byte")
		}
	}
	if len(s.GetEnv()) > MaxEnv {
		return apierr.Invalid(f+".env", "has %d variables (at most %d)", len(s.GetEnv()), MaxEnv)
	}
	for _, k := range sortedKeys(s.GetEnv()) {
		if !envNameRE.MatchString(k) {
			return apierr.Invalid(f+".env", "%s is not a valid environment variable name", apierr.Quote(k))
		}
		if v := s.GetEnv()[k]; len(v) > MaxEnvValueLen || strings.ContainsRune(v, 0) {
			return apierr.Invalid(f+".env."+k, "value must be at most %d bytes with no NUL", MaxEnvValueLen)
		}
	}
	if len(s.GetPorts()) > MaxPorts {
		return apierr.Invalid(f+".ports", "has %d ports (at most %d)", len(s.GetPorts()), MaxPorts)
	}
	type pp struct {
		port  uint32
		proto managerv1.Protocol
	}
	seen := map[pp]int{}
	for i, p := range s.GetPorts() {
		pf := fmt.Sprintf("%s.ports[%d]", f, i)
		if p == nil {
			return apierr.Invalid(pf, "is empty")
		}
		if p.GetContainerPort() == 0 || p.GetContainerPort() > 65535 {
			return apierr.Invalid(pf+".containerPort", "%d is not a port (1-65535)", p.GetContainerPort())
		}
		if _, ok := managerv1.Protocol_name[int32(p.GetProtocol())]; !ok {
			return apierr.Invalid(pf+".protocol", "unknown protocol %d (want any, tcp or udp)", p.GetProtocol())
		}
		key := pp{p.GetContainerPort(), p.GetProtocol()}
		if j, dup := seen[key]; dup {
			return apierr.Invalid(pf, "container port %d/%s is also mapped by ports[%d]", key.port, protoName(key.proto), j)
		}
		seen[key] = i
		switch hp := p.GetHostPort().(type) {
		case *managerv1.PortMapping_Range:
			r := hp.Range
			if r == nil || r.GetMinPort() == 0 || r.GetMaxPort() > 65535 || r.GetMinPort() > r.GetMaxPort() {
				return apierr.Invalid(pf+".range", "bad port range %d-%d (want 1 <= minPort <= maxPort <= 65535)", r.GetMinPort(), r.GetMaxPort())
			}
		case *managerv1.PortMapping_Specific:
			if hp.Specific == 0 || hp.Specific > 65535 {
				return apierr.Invalid(pf+".specific", "%d is not a port (1-65535)", hp.Specific)
			}
		}
		if a := p.GetHostAddress(); a != "" && net.ParseIP(a) == nil {
			return apierr.Invalid(pf+".hostAddress", "%s is not an IP address", apierr.Quote(a))
		}
	}
	mounts := map[string]int{}
	for i, m := range s.GetVolumeMounts() {
		mf := fmt.Sprintf("%s.volumeMounts[%d]", f, i)
		if m == nil {
			return apierr.Invalid(mf, "is empty")
		}
		src := m.GetSource()
		switch {
		case src == "":
			return apierr.Invalid(mf+".source", "must not be empty")
		case strings.HasPrefix(src, "/"):
			if path.Clean(src) != src {
				return apierr.Invalid(mf+".source", "%s is not a clean absolute path", apierr.Quote(src))
			}
		case !volumes[src]:
			return apierr.Invalid(mf+".source", "%s is neither an absolute host path nor one of the job's volumes", apierr.Quote(src))
		}
		cp := m.GetContainerPath()
		if !strings.HasPrefix(cp, "/") || path.Clean(cp) != cp {
			return apierr.Invalid(mf+".containerPath", "%s must be a clean absolute path", apierr.Quote(cp))
		}
		if j, dup := mounts[cp]; dup {
			return apierr.Invalid(mf+".containerPath", "%s is also mounted by volumeMounts[%d]", apierr.Quote(cp), j)
		}
		mounts[cp] = i
	}
	if r := s.GetRestart(); r != nil {
		if _, ok := managerv1.RestartMode_name[int32(r.GetMode())]; !ok {
			return apierr.Invalid(f+".restart.mode", "unknown restart policy %d (want never, on-failure or always)", r.GetMode())
		}
	}
	if _, ok := managerv1.PullPolicy_name[int32(s.GetPullPolicy())]; !ok {
		return apierr.Invalid(f+".pullPolicy", "unknown pull policy %d (want ifNotPresent, always or never)", s.GetPullPolicy())
	}
	if s.GetShmSizeBytes() < 0 {
		return apierr.Invalid(f+".shmSizeBytes", "must not be negative")
	}
	for i, c := range s.GetCpuSet() {
		if c >= 4096 {
			return apierr.Invalid(fmt.Sprintf("%s.cpuSet[%d]", f, i), "cpu %d out of range", c)
		}
	}
	return nil
}

func validateRequirements(f string, r *managerv1.JobRequirements) error {
	if r == nil {
		return nil
	}
	if c := r.GetRequiredCapacity(); c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		return apierr.Invalid(f+".requiredCapacity", "%v must be a finite number >= 0", c)
	}
	if r.RequiredGpuCapacity != nil {
		if c := float64(r.GetRequiredGpuCapacity()); c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			return apierr.Invalid(f+".requiredGpuCapacity", "%v must be a finite number >= 0", c)
		}
	}
	for i, c := range r.GetRequiredCapabilities() {
		if c.GetName() == "" {
			return apierr.Invalid(fmt.Sprintf("%s.requiredCapabilities[%d].name", f, i), "must not be empty")
		}
	}
	return nil
}

// dependencyCycle returns one dependsOn cycle, or nil.
func dependencyCycle(services []*managerv1.Service) []string {
	deps := map[string][]string{}
	for _, s := range services {
		deps[s.GetName()] = s.GetDependsOn()
	}
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var found []string
	var visit func(n string) bool
	visit = func(n string) bool {
		color[n] = grey
		stack = append(stack, n)
		for _, d := range deps[n] {
			switch color[d] {
			case grey:
				for i, s := range stack {
					if s == d {
						found = append(append([]string{}, stack[i:]...), d)
						return true
					}
				}
			case white:
				if visit(d) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	for _, s := range services {
		if color[s.GetName()] == white && visit(s.GetName()) {
			return found
		}
	}
	return nil
}

func protoName(p managerv1.Protocol) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "PROTOCOL_"))
}
