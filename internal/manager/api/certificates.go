package api

import (
	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/internal/pki"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// workerCertificate signs a registering worker's CSR when this Manager has
// a cluster CA and the request carries one; nil, nil otherwise (the worker
// then serves its stream in cleartext). r is the snapshot the handler
// checked the credential on.
func (h *Handler) workerCertificate(m *managerv1.ClusterMemberRegisterRequest, r *state.Read) (cert []byte, cas [][]byte, err error) {
	ca := h.cfg.CA
	if ca == nil || len(m.GetCsrDer()) == 0 {
		return nil, nil, nil
	}
	var nodeID string
	if tok := m.GetToken(); tok != "" {
		nodeID = r.NodeByToken(tok).GetNode().GetNodeId()
	} else {
		nodeID = r.NodeBySecret(m.GetNodeSecret()).GetNode().GetNodeId()
	}
	if nodeID == "" {
		return nil, nil, apierr.Unauthenticatedf("the node's credential is not known")
	}
	der, err := pki.SignWorkerCSR(ca, m.GetCsrDer(), nodeID, m.GetAddress(), 0)
	if err != nil {
		return nil, nil, apierr.Invalid("csrDer", "%v", err)
	}
	return der, [][]byte{ca.Cert.Raw}, nil
}
