package mgr

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/pkg/accessreplica"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// PublishedKey records, in rolestore.Namespace, the role-store replica the
// active norsk-mgr last published: its version and roles, which the next
// change's delta starts from.
const PublishedKey = "replica/published"

type publishedDoc struct {
	Version uint64          `json:"version"`
	Roles   json.RawMessage `json:"roles"`
	At      time.Time       `json:"at"`
	By      string          `json:"by"`
}

// publishState is what this norsk-mgr published last, for the console.
type publishState struct {
	mu           sync.Mutex
	replica      string // outcome of the last replica publication
	replicaAt    time.Time
	fleet        string
	fleetAt      time.Time
	noKeysLogged bool
}

func (p *publishState) setReplica(msg string) {
	p.mu.Lock()
	p.replica, p.replicaAt = msg, time.Now()
	p.mu.Unlock()
}

func (p *publishState) setFleet(msg string) {
	p.mu.Lock()
	p.fleet, p.fleetAt = msg, time.Now()
	p.mu.Unlock()
}

// publish is the active norsk-mgr's round: the role-store replica, then the
// discovery fleet. takeover is true on the first round after taking the
// lease.
func (s *Server) publish(ctx context.Context, takeover bool) {
	if err := s.publishReplica(ctx, takeover); err != nil {
		s.log.Warn("role-store replica", "err", err)
		s.pubState.setReplica("error: " + err.Error())
	}
	if err := s.publishFleet(ctx); err != nil {
		s.log.Warn("discovery fleet", "err", err)
		s.pubState.setFleet("error: " + err.Error())
	}
}

// publishReplica publishes the role store when its version moved past the
// one last published: the gzipped snapshot JWS and the delta JWS from the
// last published version; on a takeover with nothing changed, an
// attestation of the stored version. A version the Manager already holds
// (a predecessor published it and died before recording it) is refused by
// the Manager as stale — nothing is published twice — and recorded.
func (s *Server) publishReplica(ctx context.Context, takeover bool) error {
	if len(s.cfg.SigningKeys) == 0 {
		s.pubState.mu.Lock()
		logged := s.pubState.noKeysLogged
		s.pubState.noKeysLogged = true
		s.pubState.mu.Unlock()
		if !logged {
			s.log.Warn("no signing key configured: the role-store replica is not published")
		}
		s.pubState.setReplica("not published: no signing key configured")
		return nil
	}
	key := s.cfg.SigningKeys[len(s.cfg.SigningKeys)-1]
	st, err := s.roles.Read(ctx)
	if err != nil {
		return err
	}
	if st.Version == 0 {
		s.pubState.setReplica("nothing to publish: the role store is empty")
		return nil
	}
	e, err := s.m.KvGet(norsk.Linearizable(ctx), rolestore.Namespace, PublishedKey)
	if err != nil && !errors.Is(err, norsk.ErrNotFound) {
		return err
	}
	var prev *publishedDoc
	var prevRev uint64
	if err == nil { // absent: nothing published yet
		prev = &publishedDoc{}
		if err := json.Unmarshal(e.GetValue(), prev); err != nil {
			prev = nil
		}
		prevRev = e.GetRevision()
	}
	if prev != nil && prev.Version >= st.Version {
		if !takeover {
			return nil
		}
		att, err := accessreplica.SignAttestation(key, prev.Version)
		if err != nil {
			return err
		}
		_, _, err = s.m.PublishAccessReplica(ctx, &norsk.AccessReplicaPublication{AttestationJws: att})
		if err == nil {
			s.pubState.setReplica(fmt.Sprintf("attested version %d", prev.Version))
			return nil
		}
		if !errors.Is(err, norsk.ErrFailedPrecondition) {
			return err
		}
		// The Manager holds no replica (or another version): publish the
		// snapshot alone.
		prev = nil
	}
	roles := st.RolesJSON()
	snap, err := accessreplica.SignSnapshot(key, st.Version, roles)
	if err != nil {
		return err
	}
	pub := &norsk.AccessReplicaPublication{SnapshotJws: snap}
	if prev != nil {
		ops, err := accessreplica.Diff(prev.Roles, roles)
		if err != nil {
			return err
		}
		if pub.DeltaJws, err = accessreplica.SignDelta(key, prev.Version, st.Version, ops); err != nil {
			return err
		}
	}
	_, _, err = s.m.PublishAccessReplica(ctx, pub)
	switch {
	case errors.Is(err, norsk.ErrFailedPrecondition) && prev != nil:
		// A delta from a version the Manager does not hold: try the snapshot alone.
		_, _, err = s.m.PublishAccessReplica(ctx, &norsk.AccessReplicaPublication{SnapshotJws: snap})
	case errors.Is(err, norsk.ErrInvalidArgument) && prev != nil:
		_, _, err = s.m.PublishAccessReplica(ctx, &norsk.AccessReplicaPublication{SnapshotJws: snap})
	}
	stale := errors.Is(err, norsk.ErrFailedPrecondition)
	if err != nil && !stale {
		return err
	}
	if stale {
		// Refused as not moving forward: does the Manager hold this very
		// version (a predecessor published it)? An attestation of it says.
		att, aerr := accessreplica.SignAttestation(key, st.Version)
		if aerr == nil {
			_, _, aerr = s.m.PublishAccessReplica(ctx, &norsk.AccessReplicaPublication{AttestationJws: att})
		}
		if aerr != nil {
			return err
		}
	}
	b, _ := json.Marshal(publishedDoc{Version: st.Version, Roles: roles, At: time.Now().UTC(), By: s.member})
	if _, err := s.m.KvCommit(ctx, rolestore.Namespace, []norsk.KvWrite{norsk.KvPut(PublishedKey, b).IfRevision(prevRev)}, norsk.KvCommitOptions{}); err != nil && !errors.Is(err, norsk.ErrFailedPrecondition) {
		return fmt.Errorf("record the published version: %w", err)
	}
	if stale {
		s.pubState.setReplica(fmt.Sprintf("version %d was already published", st.Version))
		return nil
	}
	s.log.Info("published the role-store replica", "version", st.Version)
	s.audit(ctx, "", "replica-published", map[string]any{"version": st.Version, "delta": pub.DeltaJws != ""})
	s.pubState.setReplica(fmt.Sprintf("published version %d", st.Version))
	return nil
}

// publishFleet publishes the discovery fleet when the replicas' addresses
// (every norsk-mgr's record) differ from the fleet in force, or when none
// is: the first publish makes the tier secret and the leaf token, which
// then stay in force.
func (s *Server) publishFleet(ctx context.Context) error {
	recs, err := s.replicaRecords(ctx)
	if err != nil {
		return err
	}
	var addrs []string
	for _, r := range recs {
		if r.Discovery != "" && !slices.Contains(addrs, r.Discovery) {
			addrs = append(addrs, r.Discovery)
		}
	}
	slices.Sort(addrs)
	if len(addrs) == 0 {
		return nil
	}
	fleet, err := s.m.GetDiscoveryFleet(norsk.Linearizable(ctx))
	if err != nil {
		return err
	}
	if fleet != nil && slices.Equal(fleet.GetAddresses(), addrs) {
		return nil
	}
	next := &norsk.DiscoveryFleet{Addresses: addrs}
	if fleet != nil {
		next.TierSecret, next.LeafToken = fleet.GetTierSecret(), fleet.GetLeafToken()
	} else {
		next.TierSecret, next.LeafToken = secret(), secret()
	}
	if _, _, err := s.m.PublishDiscoveryFleet(ctx, next); err != nil {
		return err
	}
	s.log.Info("published the discovery fleet", "addresses", addrs)
	s.audit(ctx, "", "fleet-published", map[string]any{"addresses": addrs})
	s.pubState.setFleet(fmt.Sprintf("published %d replica addresses", len(addrs)))
	return nil
}

func secret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
