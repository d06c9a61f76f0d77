package ec2sim

import "encoding/xml"

// The EC2 Query API's XML shapes (API version 2016-11-15), as EC2 answers
// and the SDK's deserializers read them: camelCase elements, lists as
// <item> children.

const xmlns = "http://ec2.amazonaws.com/doc/2016-11-15/"

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlStateReason struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

type xmlGroup struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName"`
}

type xmlPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
	Tenancy          string `xml:"tenancy"`
}

type xmlInstance struct {
	InstanceID     string          `xml:"instanceId"`
	ImageID        string          `xml:"imageId"`
	State          xmlState        `xml:"instanceState"`
	PrivateDNSName string          `xml:"privateDnsName"`
	DNSName        string          `xml:"dnsName"`
	Reason         string          `xml:"reason"`
	AmiLaunchIndex int             `xml:"amiLaunchIndex"`
	InstanceType   string          `xml:"instanceType"`
	LaunchTime     string          `xml:"launchTime"`
	Placement      xmlPlacement    `xml:"placement"`
	SubnetID       string          `xml:"subnetId,omitempty"`
	VpcID          string          `xml:"vpcId,omitempty"`
	PrivateIP      string          `xml:"privateIpAddress,omitempty"`
	PublicIP       string          `xml:"ipAddress,omitempty"`
	Groups         []xmlGroup      `xml:"groupSet>item"`
	StateReason    *xmlStateReason `xml:"stateReason,omitempty"`
	Architecture   string          `xml:"architecture"`
	ClientToken    string          `xml:"clientToken,omitempty"`
	Tags           []xmlTag        `xml:"tagSet>item"`
}

type runInstancesResponse struct {
	XMLName       xml.Name      `xml:"RunInstancesResponse"`
	Xmlns         string        `xml:"xmlns,attr"`
	RequestID     string        `xml:"requestId"`
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []xmlGroup    `xml:"groupSet>item"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []xmlGroup    `xml:"groupSet>item"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
	Xmlns        string           `xml:"xmlns,attr"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
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
	Changes   []xmlStateChange `xml:"instancesSet>item"`
}

type createTagsResponse struct {
	XMLName   xml.Name `xml:"CreateTagsResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
}

type xmlGpu struct {
	Count        int    `xml:"count"`
	Manufacturer string `xml:"manufacturer"`
	Name         string `xml:"name"`
}

type xmlInstanceType struct {
	InstanceType      string `xml:"instanceType"`
	CurrentGeneration bool   `xml:"currentGeneration"`
	VCPU              struct {
		DefaultVCpus int `xml:"defaultVCpus"`
		DefaultCores int `xml:"defaultCores"`
	} `xml:"vCpuInfo"`
	Memory struct {
		SizeInMiB int64 `xml:"sizeInMiB"`
	} `xml:"memoryInfo"`
	Processor struct {
		Architectures []string `xml:"supportedArchitectures>item"`
	} `xml:"processorInfo"`
	Gpus *struct {
		Gpus []xmlGpu `xml:"gpus>item"`
	} `xml:"gpuInfo,omitempty"`
}

type describeInstanceTypesResponse struct {
	XMLName   xml.Name          `xml:"DescribeInstanceTypesResponse"`
	Xmlns     string            `xml:"xmlns,attr"`
	RequestID string            `xml:"requestId"`
	Types     []xmlInstanceType `xml:"instanceTypeSet>item"`
	NextToken string            `xml:"nextToken,omitempty"`
}

type xmlOffering struct {
	InstanceType string `xml:"instanceType"`
	LocationType string `xml:"locationType"`
	Location     string `xml:"location"`
}

type describeOfferingsResponse struct {
	XMLName   xml.Name      `xml:"DescribeInstanceTypeOfferingsResponse"`
	Xmlns     string        `xml:"xmlns,attr"`
	RequestID string        `xml:"requestId"`
	Offerings []xmlOffering `xml:"instanceTypeOfferingSet>item"`
	NextToken string        `xml:"nextToken,omitempty"`
}

type xmlIPRange struct {
	CidrIP      string `xml:"cidrIp"`
	Description string `xml:"description,omitempty"`
}

type xmlGroupPair struct {
	GroupID string `xml:"groupId"`
	UserID  string `xml:"userId"`
}

type xmlPermission struct {
	Protocol string         `xml:"ipProtocol"`
	FromPort int32          `xml:"fromPort"`
	ToPort   int32          `xml:"toPort"`
	Groups   []xmlGroupPair `xml:"groups>item"`
	IPRanges []xmlIPRange   `xml:"ipRanges>item"`
}

type xmlSecurityGroup struct {
	OwnerID     string          `xml:"ownerId"`
	GroupID     string          `xml:"groupId"`
	GroupName   string          `xml:"groupName"`
	Description string          `xml:"groupDescription"`
	VpcID       string          `xml:"vpcId"`
	Ingress     []xmlPermission `xml:"ipPermissions>item"`
	Tags        []xmlTag        `xml:"tagSet>item"`
}

type describeSecurityGroupsResponse struct {
	XMLName   xml.Name           `xml:"DescribeSecurityGroupsResponse"`
	Xmlns     string             `xml:"xmlns,attr"`
	RequestID string             `xml:"requestId"`
	Groups    []xmlSecurityGroup `xml:"securityGroupInfo>item"`
	NextToken string             `xml:"nextToken,omitempty"`
}

type xmlRegion struct {
	Name     string `xml:"regionName"`
	Endpoint string `xml:"regionEndpoint"`
	OptIn    string `xml:"optInStatus"`
}

type describeRegionsResponse struct {
	XMLName   xml.Name    `xml:"DescribeRegionsResponse"`
	Xmlns     string      `xml:"xmlns,attr"`
	RequestID string      `xml:"requestId"`
	Regions   []xmlRegion `xml:"regionInfo>item"`
}

type xmlZone struct {
	Name   string `xml:"zoneName"`
	State  string `xml:"zoneState"`
	Region string `xml:"regionName"`
	ID     string `xml:"zoneId"`
	Type   string `xml:"zoneType"`
	OptIn  string `xml:"optInStatus"`
}

type describeZonesResponse struct {
	XMLName   xml.Name  `xml:"DescribeAvailabilityZonesResponse"`
	Xmlns     string    `xml:"xmlns,attr"`
	RequestID string    `xml:"requestId"`
	Zones     []xmlZone `xml:"availabilityZoneInfo>item"`
}

// errorResponse is EC2's error shape.
type errorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Errors    []xmlErr `xml:"Errors>Error"`
	RequestID string   `xml:"RequestID"`
}

type xmlErr struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}
