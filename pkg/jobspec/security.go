package jobspec

import (
	"regexp"
	"strconv"
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Roles of API tokens.
const (
	RoleAdmin     = "admin"
	RoleOperator  = "operator"
	RoleReadOnly  = "read-only"
	RoleWorker    = "worker"
	RolePublisher = "publisher"
)

// Roles lists every role.
var Roles = []string{RoleAdmin, RoleOperator, RoleReadOnly, RoleWorker, RolePublisher}

var tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// ValidateTokenRequest checks a token's name and role.
func ValidateTokenRequest(name, role string, ttlS int64) error {
	if !tokenNameRE.MatchString(name) {
		return apierr.Invalid("name", "%q: use 1-64 letters, digits, '.', '_', '@' and '-', starting with a letter or digit", name)
	}
	known := false
	for _, r := range Roles {
		known = known || r == role
	}
	if !known {
		return apierr.Invalid("role", "%q is not a role (want admin, operator, read-only, worker or publisher)", role)
	}
	if ttlS < 0 {
		return apierr.Invalid("ttlS", "%d must not be negative (0 = never expires)", ttlS)
	}
	return nil
}

// splitHostPort splits "host:port" or "[v6]:port" (net.SplitHostPort
// without the network package, so the package stays pure).
func splitHostPort(addr string) (host, port string, ok bool) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", false
	}
	host, port = addr[:i], addr[i+1:]
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return "", "", false
		}
		host = host[1 : len(host)-1]
	} else if strings.ContainsAny(host, ":[]") {
		return "", "", false
	}
	return host, port, !strings.ContainsAny(host, " /")
}

// ValidateHostPort checks a host:port address; field names it.
func ValidateHostPort(field, addr string) error {
	host, port, ok := splitHostPort(addr)
	if !ok || host == "" {
		return apierr.Invalid(field, "%q is not host:port", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return apierr.Invalid(field, "%q: port must be 1-65535", addr)
	}
	return nil
}

// ValidateDiscoveryFleet checks a fleet as PublishDiscoveryFleet receives it.
func ValidateDiscoveryFleet(f *managerv1.DiscoveryFleet) error {
	switch {
	case f == nil:
		return apierr.Invalid("fleet", "is required")
	case f.GetTierSecret() == "":
		return apierr.Invalid("fleet.tierSecret", "must not be empty")
	case f.GetTierSecret() == f.GetLeafToken():
		return apierr.Invalid("fleet.tierSecret", "must differ from the leaf token")
	case len(f.GetAddresses()) == 0 && f.GetAddress() == "":
		return apierr.Invalid("fleet.addresses", "give at least one replica address (or address, for a single server)")
	case len(f.GetAddresses()) > 64:
		return apierr.Invalid("fleet.addresses", "has %d addresses (at most 64)", len(f.GetAddresses()))
	case len(f.GetTierSecret()) > 1024 || len(f.GetLeafToken()) > 1024:
		return apierr.Invalid("fleet", "secrets are at most 1024 bytes")
	}
	for i, a := range f.GetAddresses() {
		if err := ValidateHostPort("fleet.addresses["+strconv.Itoa(i)+"]", a); err != nil {
			return err
		}
	}
	if a := f.GetAddress(); a != "" {
		if err := ValidateHostPort("fleet.address", a); err != nil {
			return err
		}
	}
	return nil
}

// Steps of a tier-secret rotation (RotateDiscoveryTierSecret).
const (
	RotationStage  = "stage"
	RotationFlip   = "flip"
	RotationFinish = "finish"
)

// ValidateRotation checks a rotation step and the new tier secret it gives
// ("" at stage: the Manager makes one).
func ValidateRotation(step, newTierSecret string) error {
	switch step {
	case RotationStage:
		if len(newTierSecret) > 1024 {
			return apierr.Invalid("newTierSecret", "is at most 1024 bytes")
		}
	case RotationFlip, RotationFinish:
		if newTierSecret != "" {
			return apierr.Invalid("newTierSecret", "only stage takes a new tier secret (this step is %s)", step)
		}
	default:
		return apierr.Invalid("step", "%s is not a rotation step (want stage, flip or finish)", apierr.Quote(step))
	}
	return nil
}
