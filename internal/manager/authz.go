package manager

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Credential prefixes. An API token is "nmt_<id>.<secret>"; workers present
// their one-shot registration token ("nrt_…") or, once registered, their
// node secret ("nns_…").
const (
	apiTokenPrefix   = "nmt_"
	regTokenPrefix   = "nrt_"
	nodeSecretPrefix = "nns_"
	// clusterSecretPrefix marks the cluster secret as the members present
	// it to each other ("ncs_<secret>").
	clusterSecretPrefix = "ncs_"
	// internalPrefix marks the credential this process's own AutoManager
	// calls its member with ("nit_<secret>"; the secret is made at start and
	// never leaves the process).
	internalPrefix = "nit_"
	// roleMember is another member of this cluster (the Members service).
	roleMember = "member"
	// roleHostAgent is a host agent presenting its registration token.
	roleHostAgent     = "host-agent"
	authorizationHdr  = "Authorization"
	bearerPrefix      = "Bearer "
	identityAnonymous = "anonymous"
)

// rolePermissions says what each role may do.
var rolePermissions = map[string][]managerv1.Permission{
	state.RoleAdmin: {
		managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_READ, managerv1.Permission_PERMISSION_OPERATE,
		managerv1.Permission_PERMISSION_ADMIN, managerv1.Permission_PERMISSION_PUBLISH, managerv1.Permission_PERMISSION_REGISTER,
		managerv1.Permission_PERMISSION_CLUSTER,
	},
	roleMember:         {managerv1.Permission_PERMISSION_MEMBER},
	state.RoleOperator: {managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_READ, managerv1.Permission_PERMISSION_OPERATE},
	state.RoleReadOnly: {managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_READ},
	state.RoleWorker:   {managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_REGISTER},
	// A host agent registering: RegisterHostAgent only (the handler checks
	// the procedure's token is the host's).
	roleHostAgent:       {managerv1.Permission_PERMISSION_REGISTER},
	state.RolePublisher: {managerv1.Permission_PERMISSION_HELLO, managerv1.Permission_PERMISSION_PUBLISH},
}

// identity is who a call comes from.
type identity struct {
	// name is what the audit log records ("token:ops-alice/1f2e…",
	// "node:encoder-7").
	name string
	// tokenID is the API token's id ("" for other credentials).
	tokenID string
	role    string
	// key is the rate limiter's key (the token id or the node).
	key string
	// recheck, if set, says whether the credential is still good now (a
	// long-lived call, such as an event stream, checks it again as it goes:
	// a token revoked or expired meanwhile ends it).
	recheck func() error
}

// can reports whether the identity's role has any of perms.
func (id identity) can(perms ...managerv1.Permission) bool {
	for _, have := range rolePermissions[id.role] {
		for _, want := range perms {
			if have == want {
				return true
			}
		}
	}
	return false
}

// autoManagerCaller is the identity of this process's own AutoManager.
const autoManagerCaller = "automanager"

type identityKey struct{}

// callerOf returns the identity of the call in ctx (ok false outside one).
func callerOf(ctx context.Context) (identity, bool) {
	id, ok := ctx.Value(identityKey{}).(identity)
	return id, ok
}

// authzTable maps each procedure of the Manager and Members services to the
// permissions that allow it, read from the `allow` option of the service
// descriptors.
type authzTable map[string][]managerv1.Permission

// servedServices are the services the API serves, by descriptor.
var servedServices = []protoreflect.ServiceDescriptor{
	managerv1.File_norsk_manager_v1_manager_proto.Services().ByName("Manager"),
	managerv1.File_norsk_manager_v1_cluster_proto.Services().ByName("Members"),
}

// buildAuthzTable reads the services' descriptors. An RPC without an
// `allow` option is an error: the Manager refuses to start rather than serve
// a call nobody decided who may make.
func buildAuthzTable() (authzTable, error) {
	t := authzTable{}
	var missing []string
	for _, svc := range servedServices {
		if svc == nil {
			return nil, errors.New("authz: a served service is missing from the descriptors")
		}
		methods := svc.Methods()
		for i := 0; i < methods.Len(); i++ {
			m := methods.Get(i)
			perms := methodPermissions(m)
			if len(perms) == 0 {
				missing = append(missing, string(m.FullName()))
				continue
			}
			t["/"+string(svc.FullName())+"/"+string(m.Name())] = perms
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("authz: RPCs with no `allow` option (say who may call them in the .proto): %s", strings.Join(missing, ", "))
	}
	return t, nil
}

// witnessServes are the Manager RPCs a witness answers: it serves no API
// but the cluster's own management (its status and events, and refusing a
// forced recovery with a reason).
var witnessServes = map[string]bool{
	managerv1connect.ManagerGetClusterStatusProcedure: true,
	managerv1connect.ManagerGetClusterEventsProcedure: true,
	managerv1connect.ManagerForceStandaloneProcedure:  true,
	managerv1connect.ManagerLeaveQuorumProcedure:      true,
	managerv1connect.ManagerHelloProcedure:            true,
}

func methodPermissions(m protoreflect.MethodDescriptor) []managerv1.Permission {
	opts, ok := m.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil {
		return nil
	}
	perms, _ := proto.GetExtension(opts, managerv1.E_Allow).([]managerv1.Permission)
	return perms
}

// authorizer authenticates every call and checks it against the table; it
// also rate-limits each identity.
type authorizer struct {
	table authzTable
	read  func() *state.Read
	clock clock.Clock
	rate  rate.Limit
	burst int
	// clusterSecret is the members' shared secret ("" standalone: no
	// member calls are accepted).
	clusterSecret string
	// internalSecret is the in-process AutoManager's credential.
	internalSecret string
	// witness: this member serves only witnessServes of the Manager API.
	witness bool

	// catchUp, when set, brings this member up to everything committed (a
	// linearizable read): a credential made moments ago (a new token, a
	// slot's registration token) may not have reached a follower, or a
	// primary just elected, yet.
	catchUp func(context.Context) error

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

// unknownCredential is a well-formed credential (an API token id, a
// registration token, a node secret) this member's state does not hold.
// refusal, if set, goes to the caller as apierr.RefusalHeader.
type unknownCredential struct {
	err     error
	refusal string
}

func (u unknownCredential) Error() string { return u.err.Error() }
func (u unknownCredential) Unwrap() error { return u.err }

// catchUpTimeout bounds how long an unknown credential waits for this
// member to catch up with the primary before it is refused.
const catchUpTimeout = 2 * time.Second

func newAuthorizer(read func() *state.Read, cfg Config) (*authorizer, error) {
	t, err := buildAuthzTable()
	if err != nil {
		return nil, err
	}
	if _, ok := t[managerv1connect.ManagerHelloProcedure]; !ok {
		return nil, errors.New("authz: the descriptor has no Hello")
	}
	return &authorizer{table: t, read: read, clock: cfg.Clock, rate: rate.Limit(cfg.RateLimit), burst: int(2 * cfg.RateLimit),
		clusterSecret: cfg.ClusterSecret, internalSecret: randomToken("", 24), witness: cfg.Witness, limiters: map[string]*rate.Limiter{}}, nil
}

// internalCredential is the bearer credential of this process's own
// AutoManager: an administrator, not rate-limited, audited as
// "automanager".
func (a *authorizer) internalCredential() string { return internalPrefix + a.internalSecret }

// authenticate turns a bearer credential into an identity.
func (a *authorizer) authenticate(header string) (identity, error) {
	cred, ok := strings.CutPrefix(header, bearerPrefix)
	cred = strings.TrimSpace(cred)
	if !ok || cred == "" {
		return identity{}, apierr.Unauthenticatedf("no credential: send an API token as a bearer token (norsk-ctl --token, $NORSK_TOKEN)")
	}
	if secret, ok := strings.CutPrefix(cred, clusterSecretPrefix); ok {
		if a.clusterSecret == "" || subtle.ConstantTimeCompare([]byte(secret), []byte(a.clusterSecret)) != 1 {
			return identity{}, apierr.Unauthenticatedf("the cluster secret does not match this member's (clusterSecret must be the same on every member)")
		}
		// Members are not rate-limited by caller: forwarded writes are
		// already limited where they came in.
		return identity{name: "member", role: roleMember, key: ""}, nil
	}
	if secret, ok := strings.CutPrefix(cred, internalPrefix); ok {
		if subtle.ConstantTimeCompare([]byte(secret), []byte(a.internalSecret)) != 1 {
			return identity{}, apierr.Unauthenticatedf("not this member's internal credential")
		}
		return identity{name: autoManagerCaller, role: state.RoleAdmin, key: ""}, nil
	}
	r := a.read()
	switch {
	case strings.HasPrefix(cred, apiTokenPrefix):
		id, secret, ok := strings.Cut(strings.TrimPrefix(cred, apiTokenPrefix), ".")
		rec := r.Token(id)
		if !ok {
			return identity{}, apierr.Unauthenticatedf("unknown API token")
		}
		if rec == nil {
			return identity{}, unknownCredential{err: apierr.Unauthenticatedf("unknown API token")}
		}
		sum := sha256.Sum256([]byte(secret))
		want, err := hex.DecodeString(rec.GetSecretHash())
		if err != nil || subtle.ConstantTimeCompare(sum[:], want) != 1 {
			return identity{}, apierr.Unauthenticatedf("unknown API token")
		}
		tok := rec.GetToken()
		if tok.GetRevoked() {
			return identity{}, apierr.Unauthenticatedf("API token %s (%s) has been revoked", tok.GetId(), tok.GetName())
		}
		if exp := tok.GetExpiresAt(); exp != nil && !a.clock.Now().Before(exp.AsTime()) {
			return identity{}, apierr.Unauthenticatedf("API token %s (%s) expired at %s", tok.GetId(), tok.GetName(), exp.AsTime().UTC().Format(time.RFC3339))
		}
		return identity{name: "token:" + tok.GetName() + "/" + tok.GetId(), tokenID: tok.GetId(), role: tok.GetRole(), key: "t:" + tok.GetId(),
			recheck: func() error { _, err := a.authenticate(header); return err }}, nil
	case strings.HasPrefix(cred, regTokenPrefix):
		rec := r.NodeByToken(cred)
		if rec == nil {
			return identity{}, unknownCredential{err: apierr.Unauthenticatedf("registration token is unknown or already used")}
		}
		if rec.GetTokenUsed() {
			return identity{}, apierr.Unauthenticatedf("registration token is unknown or already used")
		}
		n := rec.GetNode().GetNodeId()
		return identity{name: "slot:" + n, role: state.RoleWorker, key: "n:" + n}, nil
	case strings.HasPrefix(cred, state.HostAgentTokenPrefix):
		// A host agent's one-shot registration token: it may register
		// (RegisterHostAgent checks the token is this host's, unused).
		rec := r.HostAgentByToken(cred)
		if rec == nil {
			return identity{}, unknownCredential{err: apierr.Unauthenticatedf("host agent registration token is unknown")}
		}
		if rec.GetTokenUsed() {
			return identity{}, apierr.Unauthenticatedf("host agent %s's registration token has already been used", rec.GetName())
		}
		return identity{name: "host-agent:" + rec.GetName(), role: roleHostAgent, key: "h:" + rec.GetName()}, nil
	case strings.HasPrefix(cred, state.HostAgentSecretPrefix):
		// A registered host agent renewing its certificate with its host
		// secret (RegisterHostAgent checks the secret is this host's).
		rec := r.HostAgentBySecret(cred)
		if rec == nil {
			return identity{}, unknownCredential{err: apierr.Unauthenticatedf("host secret is unknown")}
		}
		return identity{name: "host-agent:" + rec.GetName(), role: roleHostAgent, key: "h:" + rec.GetName()}, nil
	case strings.HasPrefix(cred, nodeSecretPrefix):
		rec := r.NodeBySecret(cred)
		if rec == nil {
			return identity{}, unknownCredential{err: apierr.Unauthenticatedf("node secret is not known (its slot may have been deregistered)"), refusal: apierr.RefusalNodeSecretUnknown}
		}
		n := rec.GetNode().GetNodeId()
		return identity{name: "node:" + n, role: state.RoleWorker, key: "n:" + n,
			recheck: func() error { _, err := a.authenticate(header); return err }}, nil
	}
	return identity{}, apierr.Unauthenticatedf("not a Norsk Manager credential")
}

// authorize authenticates a call of procedure and checks its permission and
// rate. The returned context carries the identity.
func (a *authorizer) authorize(ctx context.Context, procedure, header string) (context.Context, error) {
	return a.authorizeHolding(ctx, procedure, header, nil)
}

// authorizeHolding is authorize; hold, if set, is called before a call with
// a credential this member does not know waits to catch up (the only wait
// before a call is authenticated): it bounds how many may wait, refusing
// with the error it returns, and the call releases what it holds once done
// waiting.
func (a *authorizer) authorizeHolding(ctx context.Context, procedure, header string, hold func() (release func(), err error)) (context.Context, error) {
	perms, ok := a.table[procedure]
	if !ok {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s is not in the authorisation table", procedure))
	}
	id, err := a.authenticate(header)
	if errors.As(err, new(unknownCredential)) && a.catchUp != nil {
		// A well-formed credential this member does not know may have
		// been made a moment ago: refuse it only once caught up with
		// everything committed (a member that cannot catch up cannot
		// tell).
		release := func() {}
		if hold != nil {
			r, herr := hold()
			if herr != nil {
				return nil, rpcerr.ToConnect(herr)
			}
			release = r
		}
		cctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
		if cerr := a.catchUp(cctx); cerr == nil {
			id, err = a.authenticate(header)
		} else {
			err = apierr.Unavailablef("this member cannot check the credential: it is not caught up with the primary (%v); retry, or call another member", cerr)
		}
		cancel()
		release()
	}
	if err != nil {
		ce := rpcerr.ToConnect(err).(*connect.Error)
		var uc unknownCredential
		if errors.As(err, &uc) && uc.refusal != "" {
			ce.Meta().Set(apierr.RefusalHeader, uc.refusal)
		}
		return nil, ce
	}
	if !id.can(perms...) {
		return nil, rpcerr.ToConnect(apierr.New(apierr.PermissionDenied, "%s (role %s) may not call %s (it needs %s)",
			id.name, id.role, methodName(procedure), permissionWords(perms)))
	}
	if a.witness && strings.HasPrefix(procedure, "/"+managerv1connect.ManagerName+"/") && !witnessServes[procedure] {
		return nil, rpcerr.ToConnect(apierr.Unavailablef("this member is a witness: it votes but serves no API; call a full member"))
	}
	if id.key != "" && !a.limiter(id.key).Allow() {
		return nil, rpcerr.ToConnect(apierr.New(apierr.ResourceExhausted, "%s is over its rate limit of %.0f calls/s; slow down and retry", id.name, float64(a.rate)))
	}
	return context.WithValue(ctx, identityKey{}, id), nil
}

func (a *authorizer) limiter(key string) *rate.Limiter {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.limiters[key]
	if !ok {
		if len(a.limiters) > 100_000 {
			a.limiters = map[string]*rate.Limiter{} // bound the memory; limits restart
		}
		l = rate.NewLimiter(a.rate, a.burst)
		a.limiters[key] = l
	}
	return l
}

func permissionWords(perms []managerv1.Permission) string {
	words := make([]string, len(perms))
	for i, p := range perms {
		words[i] = strings.ToLower(strings.TrimPrefix(p.String(), "PERMISSION_"))
	}
	return strings.Join(words, " or ")
}

// interceptor applies the authorizer to unary and streaming calls.
func (a *authorizer) interceptor() connect.Interceptor { return authInterceptor{a} }

type authInterceptor struct{ a *authorizer }

// The API's calls arrive authorised by the gate (gate.go), from their
// headers, before their bodies were read: the interceptor authorises only
// a call that did not pass it.

func (i authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if _, ok := callerOf(ctx); ok {
			return next(ctx, req)
		}
		ctx, err := i.a.authorize(ctx, req.Spec().Procedure, req.Header().Get(authorizationHdr))
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if _, ok := callerOf(ctx); ok {
			return next(ctx, conn)
		}
		ctx, err := i.a.authorize(ctx, conn.Spec().Procedure, conn.RequestHeader().Get(authorizationHdr))
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// mayReadSecrets reports whether the caller may see the registration tokens
// of cluster slots in ListClusterNodes (operators hand them to workers;
// read-only callers see them blanked; events never carry them).
func mayReadSecrets(ctx context.Context) bool {
	id, ok := callerOf(ctx)
	return ok && id.can(managerv1.Permission_PERMISSION_OPERATE)
}
