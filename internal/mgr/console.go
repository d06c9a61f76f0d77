package mgr

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/norsk-go/norsk-manager/internal/mgr/rolestore"
	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

//go:embed static
var staticFS embed.FS

// rank orders roles: an action needs at least its role.
func rank(role string) int {
	switch role {
	case rolestore.RoleAdmin:
		return 3
	case rolestore.RoleOperator:
		return 2
	case rolestore.RoleViewer:
		return 1
	}
	return 0
}

// principal is the signed-in user of a request.
type principal struct {
	sess *session
	user *rolestore.User
}

type ctxKey struct{}

// consoleHandler is the console: the static application at /, its JSON API
// under /api/ (reads: any signed-in user; actions: POST with the session's
// CSRF token, and at least the action's role) and the live change stream
// /api/events (server-sent events).
func (s *Server) consoleHandler() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(staticFS, "static")
	files := http.FileServerFS(sub)
	// The application's files are immutable under /static/<version>/ (a
	// hash of their content), so a browser fetches them once.
	prefix := "/static/" + staticVersion + "/"
	mux.Handle("GET "+prefix, http.StripPrefix(prefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		files.ServeHTTP(w, r)
	})))
	index, _ := fs.ReadFile(sub, "index.html")
	indexHTML := strings.ReplaceAll(string(index), "/static/", prefix)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		page := indexHTML
		// A signed-in user's session rides in the page: one round trip less.
		if p, ok := s.authenticate(r); ok {
			b, _ := json.Marshal(s.sessionInfo(p))
			page = strings.Replace(page, "</head>", `<meta name="norsk-session" content="`+html.EscapeString(string(b))+`">`+"\n</head>", 1)
		}
		_, _ = io.WriteString(w, page)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("POST /api/login", s.handleLogin)
	mux.HandleFunc("POST /api/logout", s.action(rolestore.RoleViewer, s.handleLogout))
	mux.HandleFunc("GET /api/session", s.read(s.handleSession))
	mux.HandleFunc("GET /api/events", s.read(s.handleEvents))

	mux.HandleFunc("GET /api/overview", s.read(s.apiOverview))
	mux.HandleFunc("GET /api/jobs", s.read(s.apiJobs))
	mux.HandleFunc("GET /api/jobs/{id}", s.read(s.apiJob))
	mux.HandleFunc("GET /api/jobs/{id}/explain", s.read(s.apiExplain))
	mux.HandleFunc("POST /api/jobs/{id}/start", s.action(rolestore.RoleOperator, s.actStartJob))
	mux.HandleFunc("POST /api/jobs/{id}/stop", s.action(rolestore.RoleOperator, s.actStopJob))
	mux.HandleFunc("POST /api/jobs/{id}/migrate", s.action(rolestore.RoleOperator, s.actMigrate))
	mux.HandleFunc("GET /api/bundles", s.read(s.apiBundles))
	mux.HandleFunc("GET /api/migrations", s.read(s.apiMigrations))
	mux.HandleFunc("POST /api/migrations/{id}/abort", s.action(rolestore.RoleOperator, s.actAbortMigration))
	mux.HandleFunc("POST /api/migrations/{id}/forget", s.action(rolestore.RoleOperator, s.actForgetMigration))
	mux.HandleFunc("GET /api/nodes", s.read(s.apiNodes))
	mux.HandleFunc("POST /api/nodes/{id}/drain", s.action(rolestore.RoleOperator, s.actDrain))
	mux.HandleFunc("POST /api/nodes/{id}/tags", s.action(rolestore.RoleOperator, s.actTags))
	mux.HandleFunc("POST /api/nodes/{id}/prefetch", s.action(rolestore.RoleOperator, s.actPrefetch))
	mux.HandleFunc("GET /api/cluster", s.read(s.apiCluster))
	mux.HandleFunc("GET /api/leases", s.read(s.apiLeases))
	mux.HandleFunc("POST /api/leases/pause", s.action(rolestore.RoleOperator, s.actPauseLeases))
	mux.HandleFunc("POST /api/leases/resume", s.action(rolestore.RoleOperator, s.actResumeLeases))
	mux.HandleFunc("GET /api/audit", s.read(s.apiAudit))
	mux.HandleFunc("GET /api/audit/verify", s.read(s.apiAuditVerify))
	mux.HandleFunc("GET /api/kv", s.read(s.apiKV))
	mux.HandleFunc("GET /api/users", s.read(s.apiUsers))
	mux.HandleFunc("POST /api/users", s.action(rolestore.RoleAdmin, s.actAddUser))
	mux.HandleFunc("POST /api/users/{name}/role", s.action(rolestore.RoleAdmin, s.actSetRole))
	mux.HandleFunc("POST /api/users/{name}/password", s.action(rolestore.RoleAdmin, s.actSetPassword))
	mux.HandleFunc("POST /api/users/{name}/remove", s.action(rolestore.RoleAdmin, s.actRemoveUser))
	mux.HandleFunc("GET /api/discovery", s.read(s.apiDiscovery))
	mux.HandleFunc("POST /api/discovery/rotate", s.action(rolestore.RoleAdmin, s.actRotate))
	return securityHeaders(mux)
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

// authenticate returns the request's signed-in user: a valid session cookie
// whose user still exists with the epoch it was signed at.
func (s *Server) authenticate(r *http.Request) (*principal, bool) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return nil, false
	}
	sess, ok := s.sessions.decode(c.Value, time.Now())
	if !ok {
		return nil, false
	}
	u, err := s.roles.Get(r.Context(), sess.User)
	if err != nil || u.Epoch != sess.Epoch {
		return nil, false
	}
	return &principal{sess: sess, user: u}, true
}

type handler func(w http.ResponseWriter, r *http.Request, p *principal)

// read serves a signed-in user's GET.
func (s *Server) read(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.authenticate(r)
		if !ok {
			apiError(w, http.StatusUnauthorized, "sign in first")
			return
		}
		h(w, r, p)
	}
}

// action serves a POST that changes something: signed in, same origin, the
// session's CSRF token in CSRFHeader, and at least role.
func (s *Server) action(role string, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.authenticate(r)
		if !ok {
			apiError(w, http.StatusUnauthorized, "sign in first")
			return
		}
		if !sameOrigin(r) || !s.sessions.checkCSRF(p.sess, r.Header.Get(CSRFHeader)) {
			apiError(w, http.StatusForbidden, "missing or wrong CSRF token")
			return
		}
		if rank(p.user.Role) < rank(role) {
			s.audit(r.Context(), p.user.Name, "action-refused", map[string]any{"action": r.URL.Path, "role": p.user.Role, "needs": role})
			apiError(w, http.StatusForbidden, "your role ("+p.user.Role+") may not do this: it needs "+role)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		h(w, r, p)
	}
}

// sameOrigin refuses a cross-site request (Sec-Fetch-Site, else Origin).
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		return strings.TrimPrefix(strings.TrimPrefix(o, "https://"), "http://") == r.Host
	}
	return true
}

func apiError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// sdkError answers an SDK error with the HTTP status of its code.
func sdkError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	switch {
	case errors.Is(err, norsk.ErrInvalidArgument):
		code = http.StatusBadRequest
	case errors.Is(err, norsk.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, norsk.ErrFailedPrecondition), errors.Is(err, norsk.ErrAborted), errors.Is(err, norsk.ErrAlreadyExists):
		code = http.StatusConflict
	case errors.Is(err, norsk.ErrPermissionDenied):
		code = http.StatusForbidden
	case errors.Is(err, norsk.ErrUnavailable):
		code = http.StatusServiceUnavailable
	case errors.Is(err, rolestore.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, rolestore.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, rolestore.ErrExists), errors.Is(err, rolestore.ErrLastAdmin):
		code = http.StatusConflict
	}
	apiError(w, code, err.Error())
}

var pj = protojson.MarshalOptions{UseEnumNumbers: false, EmitUnpopulated: false}

// pm renders a proto message as a JSON value.
func pm(m proto.Message) json.RawMessage {
	if m == nil {
		return json.RawMessage("null")
	}
	b, err := pj.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

func pms[T proto.Message](ms []T) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		out = append(out, pm(m))
	}
	return out
}

func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// done audits an action and answers it: the SDK's error, or ok with v.
func (s *Server) done(w http.ResponseWriter, r *http.Request, p *principal, action string, target map[string]any, v any, err error) {
	fields := map[string]any{"action": action}
	for k, x := range target {
		fields[k] = x
	}
	if err != nil {
		fields["error"] = err.Error()
	}
	s.audit(r.Context(), p.user.Name, "action", fields)
	if err != nil {
		sdkError(w, err)
		return
	}
	if v == nil {
		v = map[string]bool{"ok": true}
	}
	writeJSON(w, http.StatusOK, v)
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		apiError(w, http.StatusForbidden, "cross-site sign-in refused")
		return
	}
	var in struct{ User, Password string }
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := decodeBody(r, &in); err != nil {
		apiError(w, http.StatusBadRequest, "want {\"user\", \"password\"}")
		return
	}
	if !s.limiter.allow(time.Now(), "ip:"+clientIP(r), "user:"+in.User) {
		s.audit(r.Context(), in.User, "sign-in-throttled", map[string]any{"from": clientIP(r)})
		w.Header().Set("Retry-After", strconv.Itoa(int(s.cfg.SignInRate/time.Second)+1))
		apiError(w, http.StatusTooManyRequests, "too many sign-in attempts; wait a moment")
		return
	}
	u, err := s.roles.Authenticate(r.Context(), in.User, in.Password)
	if err != nil {
		s.audit(r.Context(), in.User, "sign-in-failed", map[string]any{"from": clientIP(r)})
		if errors.Is(err, rolestore.ErrBadCredential) {
			apiError(w, http.StatusUnauthorized, err.Error())
			return
		}
		sdkError(w, err)
		return
	}
	sess := &session{ID: randomID(18), User: u.Name, Epoch: u.Epoch, Expires: time.Now().Add(SessionTTL).Unix()}
	http.SetCookie(w, s.sessions.cookie(s.sessions.encode(*sess), int(SessionTTL/time.Second)))
	s.audit(r.Context(), u.Name, "sign-in", map[string]any{"from": clientIP(r), "role": u.Role})
	writeJSON(w, http.StatusOK, map[string]string{"user": u.Name, "role": u.Role, "csrf": s.sessions.csrf(sess)})
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request, p *principal) {
	http.SetCookie(w, s.sessions.cookie("", -1))
	s.audit(r.Context(), p.user.Name, "sign-out", nil)
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (s *Server) handleSession(w http.ResponseWriter, r *http.Request, p *principal) {
	writeJSON(w, http.StatusOK, s.sessionInfo(p))
}

// sessionInfo is what the application knows of its session.
func (s *Server) sessionInfo(p *principal) map[string]any {
	doc, active, _ := s.lease.snapshot()
	activeMember := ""
	if doc != nil {
		activeMember = doc.Member
	}
	return map[string]any{"user": p.user.Name, "role": p.user.Role, "csrf": s.sessions.csrf(p.sess),
		"member": s.member, "active": active, "activeMember": activeMember}
}

// staticVersion names the application's files' content.
var staticVersion = func() string {
	h := sha256.New()
	_ = fs.WalkDir(staticFS, "static", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := staticFS.ReadFile(path)
			h.Write([]byte(path))
			h.Write(b)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}()

// handleEvents streams changes to the browser as server-sent events: one
// "change" event per change of the view, "resync" when the page should
// reload its data, and a comment every 15 s to keep the connection up.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, p *principal) {
	fl, ok := w.(http.Flusher)
	if !ok {
		apiError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	ch, cancel := s.hub.subscribe()
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "retry: 1000\n\n")
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keep.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case c, ok := <-ch:
			if !ok {
				return
			}
			b, _ := json.Marshal(c)
			if _, err := io.WriteString(w, "event: change\ndata: "+string(b)+"\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// ctxTimeout bounds an API call to the member.
func ctxTimeout(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 15*time.Second)
}
