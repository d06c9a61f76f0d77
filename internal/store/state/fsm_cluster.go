package state

import (
	"google.golang.org/protobuf/proto"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	storev1 "github.com/norsk-go/norsk-manager/api/gen/norsk/store/v1"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Member statuses.
const (
	MemberExpected = "expected"
	MemberJoined   = "joined"
	MemberRetired  = "retired"
)

// Members returns every member record, by name.
func (r *Read) Members() []*storev1.MemberRecord {
	var out []*storev1.MemberRecord
	it := r.iter(nil, tableMembers, "id_prefix", "")
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*storev1.MemberRecord))
	}
	return out
}

// Member returns a member's record, or nil.
func (r *Read) Member(name string) *storev1.MemberRecord {
	if raw := r.first(nil, tableMembers, "id", name); raw != nil {
		return raw.(*storev1.MemberRecord)
	}
	return nil
}

// Generation is the membership's generation (0 before the cluster was
// initialised).
func (r *Read) Generation() uint64 { return r.clusterMeta().GetGeneration() }

// ClusterID is the store's cluster identity ("" before the cluster was
// initialised, or on a store initialised before cluster ids until the
// primary's boot work records one).
func (r *Read) ClusterID() string { return r.clusterMeta().GetClusterId() }

// clusterMeta is the cluster singleton (nil when there is none).
func (r *Read) clusterMeta() *storev1.ClusterMeta {
	if raw, err := r.txn.First(tableSingletons, "id", singletonCluster); err == nil && raw != nil {
		return raw.(*singleton).Msg.(*storev1.ClusterMeta)
	}
	return nil
}

// putClusterMeta writes the cluster singleton with a new generation,
// keeping the cluster id.
func (t *tx) putClusterMeta(generation uint64) {
	m := &storev1.ClusterMeta{Generation: generation, ClusterId: t.read().ClusterID()}
	t.insert(tableSingletons, &singleton{Key: singletonCluster, Msg: m})
}

// ExpectedMembers lists the names of members that are expected or joined.
func (r *Read) ExpectedMembers() []string {
	var out []string
	for _, m := range r.Members() {
		if m.GetStatus() != MemberRetired {
			out = append(out, m.GetName())
		}
	}
	return out
}

func (t *tx) putMember(m *storev1.MemberRecord) { t.insert(tableMembers, m) }

// initCluster records the members a cluster formed with and its cluster
// id. A cluster already initialised is left as it is, except that one
// initialised before cluster ids gets the command's cluster id, once.
func (t *tx) initCluster(c *storev1.InitCluster) error {
	if err := validateClusterID(c.GetClusterId()); err != nil {
		return err
	}
	r := t.read()
	if len(r.Members()) > 0 || r.Generation() > 0 {
		if r.ClusterID() == "" && c.GetClusterId() != "" {
			m := &storev1.ClusterMeta{Generation: 1}
			if cur := r.clusterMeta(); cur != nil {
				m = proto.Clone(cur).(*storev1.ClusterMeta)
			}
			m.ClusterId = c.GetClusterId()
			t.insert(tableSingletons, &singleton{Key: singletonCluster, Msg: m})
		}
		return nil
	}
	for _, m := range c.GetMembers() {
		if err := needKey("member name", m.GetName()); err != nil {
			return err
		}
		n := proto.Clone(m).(*storev1.MemberRecord)
		if n.Status == "" {
			n.Status = MemberJoined
		}
		t.putMember(n)
	}
	t.insert(tableSingletons, &singleton{Key: singletonCluster, Msg: &storev1.ClusterMeta{Generation: 1, ClusterId: c.GetClusterId()}})
	return nil
}

// validateClusterID accepts "" (a proposer that made none) or 8 to 64
// characters of [a-z0-9-].
func validateClusterID(id string) error {
	if id == "" {
		return nil
	}
	if len(id) < 8 || len(id) > 64 {
		return apierr.Invalid("clusterId", "%d characters; want 8 to 64", len(id))
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return apierr.Invalid("clusterId", "only a-z, 0-9 and '-' are allowed")
		}
	}
	return nil
}

// expectMember answers with every expected or joined member's name.
func (t *tx) expectMember(c *storev1.ExpectMember) (*managerv1.AddClusterMemberResponse, error) {
	if err := needKey("member name", c.GetName()); err != nil {
		return nil, err
	}
	cur := t.read().Member(c.GetName())
	switch {
	case cur == nil:
		t.putMember(&storev1.MemberRecord{Name: c.GetName(), Witness: c.GetWitness(), Status: MemberExpected, AddedBy: c.GetBy()})
	case cur.GetStatus() == MemberRetired:
		n := proto.Clone(cur).(*storev1.MemberRecord)
		n.Status, n.Witness, n.AddedBy = MemberExpected, c.GetWitness(), c.GetBy()
		t.putMember(n)
	case cur.GetWitness() != c.GetWitness():
		return nil, apierr.FailedPreconditionf("member %q is already expected as a %s", c.GetName(), witnessWord(cur.GetWitness()))
	}
	if t.read().Generation() == 0 {
		t.putClusterMeta(1)
	}
	return &managerv1.AddClusterMemberResponse{Members: t.read().ExpectedMembers()}, nil
}

func witnessWord(w bool) string {
	if w {
		return "witness"
	}
	return "full member"
}

func (t *tx) memberJoined(c *storev1.MemberJoined) error {
	cur := t.read().Member(c.GetName())
	if cur == nil || cur.GetStatus() == MemberRetired {
		return apierr.FailedPreconditionf("member %q is not expected by this cluster; add it first (AddClusterMember)", c.GetName())
	}
	n := proto.Clone(cur).(*storev1.MemberRecord)
	n.Status = MemberJoined
	n.RaftAddress, n.ApiUrl = c.GetRaftAddress(), c.GetApiUrl()
	n.Witness = c.GetWitness()
	t.putMember(n)
	return nil
}

func (t *tx) memberRetired(c *storev1.MemberRetired) error {
	cur := t.read().Member(c.GetName())
	if cur == nil {
		return apierr.NotFoundf("no member %q", c.GetName())
	}
	n := proto.Clone(cur).(*storev1.MemberRecord)
	n.Status = MemberRetired
	t.putMember(n)
	return nil
}

func (t *tx) setGeneration(c *storev1.SetGeneration) error {
	if cur := t.read().Generation(); c.GetGeneration() <= cur {
		return apierr.FailedPreconditionf("generation %d is not after the current %d", c.GetGeneration(), cur)
	}
	t.putClusterMeta(c.GetGeneration())
	return nil
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}
