package mgr

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// alert is one thing an operator should look at now.
type alert struct {
	Level string `json:"level"` // "critical" or "warning"
	Text  string `json:"text"`
	Link  string `json:"link,omitempty"`
}

func (s *Server) apiOverview(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	st, err := s.m.GetClusterStatus(ctx)
	if err != nil {
		sdkError(w, err)
		return
	}
	counts := s.view.counts()
	nodes, err := s.m.ListNodes(ctx)
	if err != nil {
		sdkError(w, err)
		return
	}
	byState := map[string]int{}
	var alerts []alert
	for _, n := range nodes {
		state := nodeState(n.GetState())
		if n.GetDraining() && state == "online" {
			state = "draining"
		}
		byState[state]++
		if n.GetState() == norsk.NodeStateLost {
			alerts = append(alerts, alert{"critical", "node " + n.GetNodeId() + " is lost", "#/nodes"})
		}
	}
	if !st.GetQuorumHealthy() {
		alerts = append(alerts, alert{"critical", "the cluster's quorum is not healthy", "#/cluster"})
	}
	if st.GetPrimary() == "" {
		alerts = append(alerts, alert{"critical", "no primary", "#/cluster"})
	}
	for _, mb := range st.GetMembers() {
		if !mb.GetReachable() {
			alerts = append(alerts, alert{"warning", "member " + mb.GetName() + " cannot be reached", "#/cluster"})
		}
		if mb.GetControlPlaneStale() {
			alerts = append(alerts, alert{"warning", "the norsk-mgr of " + mb.GetName() + " is stale", "#/cluster"})
		}
	}
	if n := counts.ByPhase["failed"]; n > 0 {
		alerts = append(alerts, alert{"critical", strconv.Itoa(n) + " job(s) failed for good", "#/jobs"})
	}
	inFlight := 0
	for _, m := range s.view.Migrations() {
		switch m.GetPhase() {
		case norsk.PhaseDone:
		case norsk.PhaseAborted:
			if time.Since(m.GetUpdatedAt().AsTime()) < time.Hour {
				alerts = append(alerts, alert{"warning", "migration of " + m.GetSourceJobId() + " aborted: " + m.GetAbortReason(), "#/migrations"})
			}
		default:
			inFlight++
		}
	}
	if ls := s.view.Leases(); ls.GetPaused() {
		alerts = append(alerts, alert{"warning", "leases are paused: " + ls.GetReason(), "#/leases"})
	}
	if alerts == nil {
		alerts = []alert{}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"cluster": pm(st), "nodesByState": byState, "nodes": len(nodes), "jobs": counts, "alerts": alerts,
		"migrationsInFlight": inFlight, "ready": s.view.Ready(),
	})
}

func nodeState(st norsk.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "NODE_STATE_"))
}

// apiJobs is JobSearch, paged: q (an id regular expression), tag (k=v, k,
// !k, k~re), from/to (RFC 3339, on the created date), after (the last id of
// the previous page), limit (default 50, at most 500).
func (s *Server) apiJobs(w http.ResponseWriter, r *http.Request, p *principal) {
	q := r.URL.Query()
	limit := 50
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l > 0 {
		limit = min(l, 500)
	}
	settings := norsk.JobSearchSettings{Limit: uint32(limit + 1), AfterJobID: q.Get("after")}
	if id := q.Get("q"); id != "" {
		settings.Filters = append(settings.Filters, norsk.IdRegex(id))
	}
	for _, t := range q["tag"] {
		switch k, v, ok := strings.Cut(t, "="); {
		case ok:
			settings.Filters = append(settings.Filters, norsk.TagEq(k, v))
		case strings.HasPrefix(t, "!"):
			settings.Filters = append(settings.Filters, norsk.TagAbsent(t[1:]))
		case strings.Contains(t, "~"):
			k, re, _ := strings.Cut(t, "~")
			settings.Filters = append(settings.Filters, norsk.TagRegex(k, re))
		case t != "":
			settings.Filters = append(settings.Filters, norsk.TagExists(t))
		}
	}
	for _, d := range []struct {
		key string
		f   func(norsk.DateField, time.Time) *norsk.JobFilter
	}{{"from", norsk.DateAtOrAfter}, {"to", norsk.DateAtOrBefore}} {
		if v := q.Get(d.key); v != "" {
			t, err := parseTime(v)
			if err != nil {
				apiError(w, http.StatusBadRequest, d.key+": "+err.Error())
				return
			}
			settings.Filters = append(settings.Filters, d.f(norsk.DateFieldCreated, t))
		}
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	jobs, err := s.m.JobSearch(ctx, settings)
	if err != nil {
		sdkError(w, err)
		return
	}
	more := len(jobs) > limit
	if more {
		jobs = jobs[:limit]
	}
	next := ""
	if more && len(jobs) > 0 {
		next = jobs[len(jobs)-1].GetJob().GetJobId()
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": pms(jobs), "next": next})
}

func parseTime(v string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	_, err := time.Parse(time.RFC3339, v)
	return time.Time{}, err
}

func (s *Server) apiJob(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	id := r.PathValue("id")
	jh, err := s.m.JobById(ctx, id)
	if err != nil {
		sdkError(w, err)
		return
	}
	migs, err := s.m.ListMigrations(ctx, id)
	if err != nil {
		sdkError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"job": pm(jh), "migrations": pms(migs)})
}

func (s *Server) apiExplain(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	res, err := s.m.ExplainPlacement(ctx, r.PathValue("id"), r.URL.Query().Get("role"), r.URL.Query().Get("pool"))
	if err != nil {
		sdkError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, pm(res))
}

func (s *Server) actStartJob(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Role, Node string }
	if err := decodeBody(r, &in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	if in.Role == "" {
		in.Role = "primary"
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	id := r.PathValue("id")
	_, err := s.m.StartJob(ctx, id, in.Role, in.Node, norsk.StartJobOptions{})
	s.done(w, r, p, "start-job", map[string]any{"job": id, "role": in.Role, "node": in.Node}, nil, err)
}

func (s *Server) actStopJob(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Role, Node string }
	if err := decodeBody(r, &in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	id := r.PathValue("id")
	err := s.m.StopJob(ctx, id, in.Role, in.Node, norsk.StopJobOptions{})
	s.done(w, r, p, "stop-job", map[string]any{"job": id, "role": in.Role, "node": in.Node}, nil, err)
}

func strategyOf(name string) (norsk.MigrationStrategy, bool) {
	switch name {
	case "", "stopThenStart":
		return norsk.StrategyStopThenStart, true
	case "overlap":
		return norsk.StrategyOverlap, true
	case "handover":
		return norsk.StrategyHandover, true
	}
	return 0, false
}

func (s *Server) actMigrate(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Strategy, Target, Role string }
	if err := decodeBody(r, &in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	strat, ok := strategyOf(in.Strategy)
	if !ok {
		apiError(w, http.StatusBadRequest, "strategy: want stopThenStart, overlap or handover")
		return
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	id := r.PathValue("id")
	st, err := s.m.MigrateJob(ctx, id, norsk.MigrateOptions{TargetNodeID: in.Target, Strategy: strat, SourceRole: in.Role})
	var out any
	if err == nil {
		out = map[string]any{"migration": pm(st)}
	}
	s.done(w, r, p, "migrate", map[string]any{"job": id, "strategy": norsk.StrategyName(strat), "target": in.Target}, out, err)
}

func (s *Server) apiBundles(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	bs, err := s.m.ListBundles(ctx)
	if err != nil {
		sdkError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"bundles": pms(bs)})
}

func (s *Server) apiMigrations(w http.ResponseWriter, r *http.Request, p *principal) {
	writeJSON(w, http.StatusOK, map[string]any{"migrations": pms(s.view.Migrations())})
}

func (s *Server) actAbortMigration(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	id := r.PathValue("id")
	err := s.m.CancelMigration(ctx, id, "aborted from the console by "+p.user.Name)
	s.done(w, r, p, "abort-migration", map[string]any{"migration": id}, nil, err)
}

func (s *Server) actForgetMigration(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	id := r.PathValue("id")
	_, err := s.m.ForgetMigration(ctx, id)
	s.done(w, r, p, "forget-migration", map[string]any{"migration": id}, nil, err)
}

func (s *Server) apiNodes(w http.ResponseWriter, r *http.Request, p *principal) {
	// The Manager's own list: connection and load are live there, not
	// events.
	lctx, lcancel := ctxTimeout(r)
	defer lcancel()
	nodes, err := s.m.ListNodes(lctx)
	if err != nil {
		sdkError(w, err)
		return
	}
	counts := s.view.counts()
	type nodeOut struct {
		Node       json.RawMessage `json:"node"`
		Running    int             `json:"running"`
		IdleExpiry json.RawMessage `json:"idleExpiry,omitempty"`
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	out := make([]nodeOut, 0, len(nodes))
	for _, n := range nodes {
		o := nodeOut{Node: pm(n), Running: counts.OnNode[n.GetNodeId()]}
		if n.GetElastic() {
			if ie, err := s.m.GetNodeIdleExpiry(ctx, n.GetNodeId()); err == nil {
				o.IdleExpiry = pm(ie)
			}
		}
		out = append(out, o)
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": out})
}

func (s *Server) actDrain(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Draining *bool }
	if err := decodeBody(r, &in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	draining := in.Draining == nil || *in.Draining
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	id := r.PathValue("id")
	// The Manager's drain (DrainNode): it moves the node's jobs away,
	// make-before-break, and survives a failover; false undoes it.
	_, _, err := s.m.DrainNode(ctx, id, norsk.DrainOptions{Undo: !draining})
	s.done(w, r, p, "drain", map[string]any{"node": id, "draining": draining}, nil, err)
}

func (s *Server) actTags(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Tags map[string]string }
	if err := decodeBody(r, &in); err != nil || len(in.Tags) == 0 {
		apiError(w, http.StatusBadRequest, `want {"tags": {"key": "value", …}}`)
		return
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	id := r.PathValue("id")
	_, err := s.m.SetNodeTags(ctx, id, in.Tags)
	s.done(w, r, p, "tag-node", map[string]any{"node": id, "tags": in.Tags}, nil, err)
}

// actPrefetch tells a node's worker to pull images now (PrefetchImages);
// the outcomes come on the event stream and the node's images update in
// the page.
func (s *Server) actPrefetch(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Images []string }
	if err := decodeBody(r, &in); err != nil || len(in.Images) == 0 {
		apiError(w, http.StatusBadRequest, `want {"images": ["registry/repo:tag", …]}`)
		return
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	id := r.PathValue("id")
	res, err := s.m.PrefetchImages(ctx, id, in.Images)
	s.done(w, r, p, "prefetch-images", map[string]any{"node": id, "images": in.Images}, res, err)
}

func (s *Server) apiCluster(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	st, err := s.m.GetClusterStatus(ctx)
	if err != nil {
		sdkError(w, err)
		return
	}
	evs, err := s.m.GetClusterEvents(ctx, norsk.ClusterEventsQuery{Limit: 50})
	if err != nil {
		sdkError(w, err)
		return
	}
	recs, _ := s.replicaRecords(ctx)
	doc, active, leaseErr := s.lease.snapshot()
	s.pubState.mu.Lock()
	pub := map[string]any{"replica": s.pubState.replica, "replicaAt": s.pubState.replicaAt, "fleet": s.pubState.fleet, "fleetAt": s.pubState.fleetAt}
	s.pubState.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"status": pm(st), "events": pm(evs), "replicas": recs,
		"lease": doc, "self": map[string]any{"member": s.member, "url": s.url, "active": active, "leaseError": leaseErr, "published": pub}})
}

func (s *Server) apiLeases(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	ls, err := s.m.GetLeaseStatus(ctx)
	if err != nil {
		sdkError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, pm(ls))
}

func (s *Server) actPauseLeases(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Reason string }
	_ = decodeBody(r, &in)
	if in.Reason == "" {
		in.Reason = "paused from the console"
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	err := s.m.PauseLeases(ctx, in.Reason, p.user.Name+" (norsk-mgr)")
	s.done(w, r, p, "pause-leases", map[string]any{"reason": in.Reason}, nil, err)
}

func (s *Server) actResumeLeases(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	err := s.m.ResumeLeases(ctx, p.user.Name+" (norsk-mgr)")
	s.done(w, r, p, "resume-leases", nil, nil, err)
}

func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request, p *principal) {
	q := r.URL.Query()
	query := norsk.AuditLogQuery{Limit: 100, Source: q.Get("source"), Kind: q.Get("kind")}
	if b, err := strconv.ParseInt(q.Get("before"), 10, 64); err == nil {
		query.BeforeSeq = b
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	page, err := s.m.GetAuditLog(ctx, query)
	if err != nil {
		sdkError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, pm(page))
}

// apiAuditVerify re-verifies the whole chain as a client (every entry's
// hash from the previous one), without trusting the Manager.
func (s *Server) apiAuditVerify(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	v, err := s.m.VerifyAuditLog(ctx)
	if err != nil && v.Broken == nil {
		sdkError(w, err)
		return
	}
	out := map[string]any{"checked": v.Checked, "firstSeq": v.FirstSeq, "lastSeq": v.LastSeq, "ok": v.Broken == nil,
		"chainVerifiedAtBoot": v.ChainVerifiedAtBoot, "detail": v.VerificationDetail}
	if v.Broken != nil {
		out["broken"] = v.Broken.Error()
	}
	writeJSON(w, http.StatusOK, out)
}

// redacted says whether a KV value is kept from the browser: norsk-mgr's
// own secrets (password hashes, the sessions' keys).
func redacted(ns, key string) bool {
	return ns == rolestore.Namespace && (strings.HasPrefix(key, rolestore.UserPrefix) || key == SessionKeysKey)
}

func (s *Server) apiKV(w http.ResponseWriter, r *http.Request, p *principal) {
	ns := r.URL.Query().Get("ns")
	if ns == "" {
		ns = rolestore.Namespace
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	entries, schema, err := s.m.KvList(ctx, ns, r.URL.Query().Get("prefix"))
	if err != nil {
		sdkError(w, err)
		return
	}
	type entry struct {
		Key      string `json:"key"`
		Value    string `json:"value"`
		Revision uint64 `json:"revision"`
		Redacted bool   `json:"redacted,omitempty"`
	}
	out := make([]entry, 0, len(entries))
	for _, e := range entries {
		en := entry{Key: e.GetKey(), Revision: e.GetRevision()}
		if redacted(ns, e.GetKey()) {
			en.Redacted = true
		} else {
			en.Value = string(e.GetValue())
		}
		out = append(out, en)
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": ns, "schemaVersion": schema, "entries": out})
}

func (s *Server) apiUsers(w http.ResponseWriter, r *http.Request, p *principal) {
	users, err := s.roles.List(r.Context())
	if err != nil {
		sdkError(w, err)
		return
	}
	type userOut struct {
		Name    string    `json:"name"`
		Role    string    `json:"role"`
		Updated time.Time `json:"updated"`
	}
	out := []userOut{}
	for _, u := range users {
		out = append(out, userOut{u.Name, u.Role, u.Updated})
	}
	v, _, _ := s.roles.Version(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{"users": out, "version": v, "roles": rolestore.Roles})
}

func (s *Server) actAddUser(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Name, Role, Password string }
	if err := decodeBody(r, &in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	err := s.roles.Add(r.Context(), in.Name, in.Role, in.Password)
	s.done(w, r, p, "add-user", map[string]any{"name": in.Name, "role": in.Role}, nil, err)
}

func (s *Server) actSetRole(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Role string }
	if err := decodeBody(r, &in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	name := r.PathValue("name")
	err := s.roles.SetRole(r.Context(), name, in.Role)
	s.done(w, r, p, "set-role", map[string]any{"name": name, "role": in.Role}, nil, err)
}

func (s *Server) actSetPassword(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Password string }
	if err := decodeBody(r, &in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	name := r.PathValue("name")
	err := s.roles.SetPassword(r.Context(), name, in.Password)
	s.done(w, r, p, "set-password", map[string]any{"name": name}, nil, err)
}

func (s *Server) actRemoveUser(w http.ResponseWriter, r *http.Request, p *principal) {
	name := r.PathValue("name")
	err := s.roles.Remove(r.Context(), name)
	s.done(w, r, p, "remove-user", map[string]any{"name": name}, nil, err)
}

// apiDiscovery is the fleet in force (secrets never leave norsk-mgr: only
// whether they are set), every replica's record — the rotation step each
// has taken — and which step may come next.
func (s *Server) apiDiscovery(w http.ResponseWriter, r *http.Request, p *principal) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	fleet, err := s.m.GetDiscoveryFleet(ctx)
	if err != nil {
		sdkError(w, err)
		return
	}
	recs, err := s.replicaRecords(ctx)
	if err != nil {
		sdkError(w, err)
		return
	}
	phase := fleet.GetRotationPhase()
	waiting := []string{}
	for _, rec := range recs {
		if rec.Rotation != phase {
			waiting = append(waiting, rec.Member)
		}
	}
	next := ""
	switch phase {
	case "":
		next = norsk.RotationStage
	case norsk.RotationStage:
		next = norsk.RotationFlip
	case norsk.RotationFlip:
		next = norsk.RotationFinish
	}
	if fleet == nil {
		next = ""
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"published": fleet != nil, "addresses": fleet.GetAddresses(), "rotationPhase": phase,
		"alternateSecret": fleet.GetTierSecretAlt() != "", "replicas": recs, "waitingFor": waiting, "next": next,
		"interval": s.cfg.Interval.String(),
	})
}

func (s *Server) actRotate(w http.ResponseWriter, r *http.Request, p *principal) {
	var in struct{ Step string }
	if err := decodeBody(r, &in); err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !slices.Contains([]string{norsk.RotationStage, norsk.RotationFlip, norsk.RotationFinish}, in.Step) {
		apiError(w, http.StatusBadRequest, "step: want stage, flip or finish")
		return
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	_, err := s.m.RotateDiscoveryTierSecret(ctx, in.Step, "")
	s.done(w, r, p, "rotate-tier-secret", map[string]any{"step": in.Step}, nil, err)
}
