package mgr

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/pkg/discovery"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// ReplicaPrefix holds, in rolestore.Namespace, one record per norsk-mgr
// (by member): its console URL, its discovery replica's address and the
// rotation step its replica has taken — what the active one publishes as
// the fleet's addresses, and what the console shows between rotation steps.
const ReplicaPrefix = "replicas/"

type replicaRecord struct {
	Member    string `json:"member"`
	Console   string `json:"console"`
	Discovery string `json:"discovery"`
	// Rotation is the fleet's rotation phase this replica verifies with
	// ("", "stage" or "flip"); Secrets how many tier secrets it accepts.
	Rotation string    `json:"rotation"`
	Secrets  int       `json:"secrets"`
	Updated  time.Time `json:"updated"`
}

// replicaState is this norsk-mgr's discovery replica: the fleet in force as
// last read from the member.
type replicaState struct {
	mu    sync.RWMutex
	fleet *norsk.DiscoveryFleet
	rec   replicaRecord
}

func (r *replicaState) get() *norsk.DiscoveryFleet {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.fleet
}

// runReplica keeps the replica's fleet current (each interval, so that a
// rotation step is taken within one) and this norsk-mgr's record in KV
// (written only when it changes).
func (s *Server) runReplica(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.replicaOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) replicaOnce(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, max(s.cfg.Interval, time.Second))
	defer cancel()
	fleet, err := s.m.GetDiscoveryFleet(cctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("cannot read the discovery fleet", "err", err)
		}
		return
	}
	rec := replicaRecord{Member: s.member, Console: s.url, Discovery: s.discoAddr,
		Rotation: fleet.GetRotationPhase(), Secrets: len(discovery.SecretsInForce(fleet))}
	s.replica.mu.Lock()
	changedFleet := s.replica.fleet.GetTierSecret() != fleet.GetTierSecret() || s.replica.fleet.GetTierSecretAlt() != fleet.GetTierSecretAlt()
	s.replica.fleet = fleet
	same := s.replica.rec.Member == rec.Member && s.replica.rec.Console == rec.Console && s.replica.rec.Discovery == rec.Discovery &&
		s.replica.rec.Rotation == rec.Rotation && s.replica.rec.Secrets == rec.Secrets
	s.replica.mu.Unlock()
	if changedFleet {
		s.hub.publish(change{Kind: "discovery"})
	}
	if same {
		return
	}
	rec.Updated = time.Now().UTC()
	b, _ := json.Marshal(rec)
	if _, err := s.m.KvCommit(cctx, rolestore.Namespace, []norsk.KvWrite{norsk.KvPut(ReplicaPrefix+s.member, b)}, norsk.KvCommitOptions{}); err != nil {
		s.log.Warn("cannot record this replica", "err", err)
		return
	}
	s.replica.mu.Lock()
	s.replica.rec = rec
	s.replica.mu.Unlock()
	s.hub.publish(change{Kind: "discovery"})
}

// replicaRecords reads every norsk-mgr's record.
func (s *Server) replicaRecords(ctx context.Context) ([]replicaRecord, error) {
	entries, _, err := s.m.KvList(ctx, rolestore.Namespace, ReplicaPrefix)
	if err != nil {
		return nil, err
	}
	var out []replicaRecord
	for _, e := range entries {
		var r replicaRecord
		if json.Unmarshal(e.GetValue(), &r) == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// Caller kinds of the discovery replica.
const (
	CallerNode = "node"
	CallerLeaf = "leaf"
)

// discoveryHandler is the discovery replica's API, on its own listener:
//
//	GET /v1/whoami                       who the token says the caller is
//	GET /v1/services[?job=ID][&tag=k=v]  the service directory
//	GET /healthz
//
// Every call but /healthz carries "Authorization: Bearer <token>": a node
// token minted from a tier secret in force (either one during a rotation)
// or the fleet's leaf token. Anything else is 401.
func (s *Server) discoveryHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if s.replica.get() == nil {
			http.Error(w, "no discovery fleet published yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /v1/whoami", s.discoAuth(func(w http.ResponseWriter, r *http.Request, kind, nodeID string) {
		writeJSON(w, http.StatusOK, map[string]string{"kind": kind, "nodeId": nodeID, "replica": s.member})
	}))
	mux.HandleFunc("GET /v1/services", s.discoAuth(func(w http.ResponseWriter, r *http.Request, kind, nodeID string) {
		job := r.URL.Query().Get("job")
		var tagK, tagV string
		hasTag := false
		if t := r.URL.Query().Get("tag"); t != "" {
			tagK, tagV, _ = strings.Cut(t, "=")
			hasTag = true
		}
		entries := s.view.Directory(func(j *norsk.Job) bool {
			if job != "" && j.GetJobId() != job {
				return false
			}
			if hasTag {
				v, ok := j.GetTags()[tagK]
				return ok && (tagV == "" || v == tagV)
			}
			return true
		})
		if entries == nil {
			entries = []directoryEntry{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"services": entries, "replica": s.member})
	}))
	return mux
}

// errNoFleet: nothing to verify a token against yet.
var errNoFleet = errors.New("no discovery fleet is published yet")

// verifyToken says who a discovery token is: a node (with its id) or a
// leaf client.
func (s *Server) verifyToken(token string) (kind, nodeID string, err error) {
	fleet := s.replica.get()
	if fleet == nil {
		return "", "", errNoFleet
	}
	if strings.HasPrefix(token, discovery.TokenPrefix) {
		id, err := discovery.VerifyNodeToken(token, discovery.SecretsInForce(fleet)...)
		if err != nil {
			return "", "", err
		}
		return CallerNode, id, nil
	}
	if leaf := fleet.GetLeafToken(); leaf != "" && subtle.ConstantTimeCompare([]byte(token), []byte(leaf)) == 1 {
		return CallerLeaf, "", nil
	}
	return "", "", discovery.ErrRefused
}

func (s *Server) discoAuth(next func(http.ResponseWriter, *http.Request, string, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="norsk discovery"`)
			http.Error(w, "a node token or the leaf token is required", http.StatusUnauthorized)
			return
		}
		kind, id, err := s.verifyToken(tok)
		if errors.Is(err, errNoFleet) {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="norsk discovery", error="invalid_token"`)
			http.Error(w, "token refused", http.StatusUnauthorized)
			return
		}
		next(w, r, kind, id)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
