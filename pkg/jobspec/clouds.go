package jobspec

import (
	"strings"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// ValidateOciNode checks what CreateOciNode needs before a provider is
// asked: an availability domain, and no negative flexible shape.
func ValidateOciNode(m *managerv1.CreateOciNodeRequest) error {
	if m.GetAvailabilityDomain() == "" {
		return apierr.Invalid("availabilityDomain", "is required")
	}
	if m.GetOcpus() < 0 || m.GetMemoryGbs() < 0 {
		return apierr.Invalid("ocpus", "ocpus and memoryGbs must not be negative")
	}
	return nil
}

// ValidateInstanceTypeName checks DescribeInstanceType's instance type.
func ValidateInstanceTypeName(name string) error {
	if strings.TrimSpace(name) == "" {
		return apierr.Invalid("instanceType", "is required")
	}
	return nil
}

// ValidateRegion checks a region a call requires.
func ValidateRegion(region string) error {
	if region == "" {
		return apierr.Invalid("region", "is required")
	}
	return nil
}
