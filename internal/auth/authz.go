// Package auth is who may call the Manager API: the credentials it accepts
// (API tokens, registration tokens, node and host secrets, the cluster
// secret, this process's internal credential), the table of which role may
// call which RPC (read from the `allow` option in the .proto), per-caller
// rate limits, and minting and parsing API tokens. The caller's Identity
// travels in the call's context (CallerOf).
package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
	"github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1/managerv1connect"
	"github.com/norsk-go/norsk-manager/internal/clock"
	"github.com/norsk-go/norsk-manager/internal/rpcerr"
	"github.com/norsk-go/norsk-manager/internal/store/state"
	"github.com/norsk-go/norsk-manager/pkg/apiauth"
	"github.com/norsk-go/norsk-manager/pkg/apierr"
)

// Credential prefixes. An API token is "nmt_<id>.<secret>"; workers present
// their one-shot registration token ("nrt_…") or, once registered, their
// node secret ("nns_…").
const (
	APITokenPrefix          = "nmt_"
	RegistrationTokenPrefix = "nrt_"
	NodeSecretPrefix        = "nns_"
	// ClusterSecretPrefix marks the cluster secret as the members present
	// it to each other ("ncs_<secret>").
	ClusterSecretPrefix = "ncs_"
	// internalPrefix marks the credential this process's own AutoManager
	// calls its member with ("nit_<secret>"; the secret is made at start and
	// never leaves the process).
	internalPrefix = "nit_"
	// RoleMember is another member of this cluster (the Members service).
	RoleMember = apiauth.RoleMember
	// RoleHostAgent is a host agent presenting its registration token.
	RoleHostAgent = apiauth.RoleHostAgent
	// AuthorizationHeader carries the credential, after BearerPrefix.
	AuthorizationHeader = "Authorization"
	BearerPrefix        = "Bearer "
	// Anonymous names a caller with no identity in the audit log.
	Anonymous = "anonymous"
)

// Identity is who a call comes from.
type Identity struct {
	// Name is what the audit log records ("token:ops-alice/1f2e…",
	// "node:encoder-7").
	Name string
	// TokenID is the API token's id ("" for other credentials).
	TokenID string
	Role    string
	// Key is the rate limiter's Key (the token id or the node).
	Key string
	// Recheck, if set, says whether the credential is still good now (a
	// long-lived call, such as an event stream, checks it again as it goes:
	// a token revoked or expired meanwhile ends it).
	Recheck func() error
}

// Can reports whether the identity's role has any of perms.
func (id Identity) Can(perms ...managerv1.Permission) bool {
	return apiauth.Can(id.Role, perms...)
}

// AutoManagerCaller is the identity of this process's own AutoManager.
const AutoManagerCaller = "automanager"

type identityKey struct{}

// CallerOf returns the identity of the call in ctx (ok false outside one).
func CallerOf(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
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

// Authorizer authenticates every call and checks it against the table; it
// also rate-limits each identity.
type Authorizer struct {
	table apiauth.Table
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

	// CatchUp, when set, brings this member up to everything committed (a
	// linearizable read): a credential made moments ago (a new token, a
	// slot's registration token) may not have reached a follower, or a
	// primary just elected, yet.
	CatchUp func(context.Context) error

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

// Options configure an Authorizer.
type Options struct {
	// Clock is what token expiry is checked against.
	Clock clock.Clock
	// RateLimit is the calls per second each caller may make (burst: twice
	// as many).
	RateLimit float64
	// ClusterSecret is the members' shared secret ("" standalone).
	ClusterSecret string
	// Witness: this member serves no API but the few calls witnessServes
	// names.
	Witness bool
}

// NewAuthorizer builds the authorisation table from the served services'
// descriptors (an RPC without an `allow` option is an error) and checks
// credentials against the state read returns.
func NewAuthorizer(read func() *state.Read, cfg Options) (*Authorizer, error) {
	t, err := apiauth.BuildTable()
	if err != nil {
		return nil, err
	}
	if _, ok := t[managerv1connect.ManagerHelloProcedure]; !ok {
		return nil, errors.New("authz: the descriptor has no Hello")
	}
	return &Authorizer{table: t, read: read, clock: cfg.Clock, rate: rate.Limit(cfg.RateLimit), burst: int(2 * cfg.RateLimit),
		clusterSecret: cfg.ClusterSecret, internalSecret: RandomToken("", 24), witness: cfg.Witness, limiters: map[string]*rate.Limiter{}}, nil
}

// InternalCredential is the bearer credential of this process's own
// AutoManager: an administrator, not rate-limited, audited as
// "automanager".
func (a *Authorizer) InternalCredential() string { return internalPrefix + a.internalSecret }

// Serves reports whether procedure is an authenticated RPC of the served
// services.
func (a *Authorizer) Serves(procedure string) bool {
	_, ok := a.table[procedure]
	return ok
}

// Authenticate turns a bearer credential into an identity.
func (a *Authorizer) Authenticate(header string) (Identity, error) {
	cred, ok := strings.CutPrefix(header, BearerPrefix)
	cred = strings.TrimSpace(cred)
	if !ok || cred == "" {
		return Identity{}, apierr.Unauthenticatedf("no credential: send an API token as a bearer token (norsk-ctl --token, $NORSK_TOKEN)")
	}
	if secret, ok := strings.CutPrefix(cred, ClusterSecretPrefix); ok {
		if a.clusterSecret == "" || subtle.ConstantTimeCompare([]byte(secret), []byte(a.clusterSecret)) != 1 {
			return Identity{}, apierr.Unauthenticatedf("the cluster secret does not match this member's (clusterSecret must be the same on every member)")
		}
		// Members are not rate-limited by caller: forwarded writes are
		// already limited where they came in.
		return Identity{Name: "member", Role: RoleMember, Key: ""}, nil
	}
	if secret, ok := strings.CutPrefix(cred, internalPrefix); ok {
		if subtle.ConstantTimeCompare([]byte(secret), []byte(a.internalSecret)) != 1 {
			return Identity{}, apierr.Unauthenticatedf("not this member's internal credential")
		}
		return Identity{Name: AutoManagerCaller, Role: state.RoleAdmin, Key: ""}, nil
	}
	r := a.read()
	switch {
	case strings.HasPrefix(cred, APITokenPrefix):
		// A token that is not of the form MintToken makes can never be
		// known: refused at once, without waiting to catch up.
		id, hash, err := ParseToken(cred)
		if err != nil {
			return Identity{}, apierr.Unauthenticatedf("unknown API token")
		}
		rec := r.Token(id)
		if rec == nil {
			return Identity{}, unknownCredential{err: apierr.Unauthenticatedf("unknown API token")}
		}
		if subtle.ConstantTimeCompare([]byte(hash), []byte(rec.GetSecretHash())) != 1 {
			return Identity{}, apierr.Unauthenticatedf("unknown API token")
		}
		tok := rec.GetToken()
		if err := apiauth.TokenRefusal(tok, a.clock.Now()); err != nil {
			return Identity{}, err
		}
		return Identity{Name: "token:" + tok.GetName() + "/" + tok.GetId(), TokenID: tok.GetId(), Role: tok.GetRole(), Key: "t:" + tok.GetId(),
			Recheck: func() error { _, err := a.Authenticate(header); return err }}, nil
	case strings.HasPrefix(cred, RegistrationTokenPrefix):
		rec := r.NodeByToken(cred)
		if rec == nil {
			return Identity{}, unknownCredential{err: apierr.Unauthenticatedf("registration token is unknown or already used")}
		}
		if rec.GetTokenUsed() {
			return Identity{}, apierr.Unauthenticatedf("registration token is unknown or already used")
		}
		n := rec.GetNode().GetNodeId()
		return Identity{Name: "slot:" + n, Role: state.RoleWorker, Key: "n:" + n}, nil
	case strings.HasPrefix(cred, state.HostAgentTokenPrefix):
		// A host agent's one-shot registration token: it may register
		// (RegisterHostAgent checks the token is this host's, unused).
		rec := r.HostAgentByToken(cred)
		if rec == nil {
			return Identity{}, unknownCredential{err: apierr.Unauthenticatedf("host agent registration token is unknown")}
		}
		if rec.GetTokenUsed() {
			return Identity{}, apierr.Unauthenticatedf("host agent %s's registration token has already been used", rec.GetName())
		}
		return Identity{Name: "host-agent:" + rec.GetName(), Role: RoleHostAgent, Key: "h:" + rec.GetName()}, nil
	case strings.HasPrefix(cred, state.HostAgentSecretPrefix):
		// A registered host agent renewing its certificate with its host
		// secret (RegisterHostAgent checks the secret is this host's).
		rec := r.HostAgentBySecret(cred)
		if rec == nil {
			return Identity{}, unknownCredential{err: apierr.Unauthenticatedf("host secret is unknown")}
		}
		return Identity{Name: "host-agent:" + rec.GetName(), Role: RoleHostAgent, Key: "h:" + rec.GetName()}, nil
	case strings.HasPrefix(cred, NodeSecretPrefix):
		rec := r.NodeBySecret(cred)
		if rec == nil {
			return Identity{}, unknownCredential{err: apierr.Unauthenticatedf("node secret is not known (its slot may have been deregistered)"), refusal: apierr.RefusalNodeSecretUnknown}
		}
		n := rec.GetNode().GetNodeId()
		return Identity{Name: "node:" + n, Role: state.RoleWorker, Key: "n:" + n,
			Recheck: func() error { _, err := a.Authenticate(header); return err }}, nil
	}
	return Identity{}, apierr.Unauthenticatedf("not a Norsk Manager credential")
}

// Authorize authenticates a call of procedure and checks its permission and
// rate. The returned context carries the identity.
func (a *Authorizer) Authorize(ctx context.Context, procedure, header string) (context.Context, error) {
	return a.AuthorizeHolding(ctx, procedure, header, nil)
}

// AuthorizeHolding is authorize; hold, if set, is called before a call with
// a credential this member does not know waits to catch up (the only wait
// before a call is authenticated): it bounds how many may wait, refusing
// with the error it returns, and the call releases what it holds once done
// waiting.
func (a *Authorizer) AuthorizeHolding(ctx context.Context, procedure, header string, hold func() (release func(), err error)) (context.Context, error) {
	perms, ok := a.table[procedure]
	if !ok {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s is not in the authorisation table", procedure))
	}
	id, err := a.Authenticate(header)
	if errors.As(err, new(unknownCredential)) && a.CatchUp != nil {
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
		if cerr := a.CatchUp(cctx); cerr == nil {
			id, err = a.Authenticate(header)
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
	if !id.Can(perms...) {
		return nil, rpcerr.ToConnect(apiauth.Denied(id.Name, id.Role, procedure, perms))
	}
	if a.witness && strings.HasPrefix(procedure, "/"+managerv1connect.ManagerName+"/") && !witnessServes[procedure] {
		return nil, rpcerr.ToConnect(apierr.Unavailablef("this member is a witness: it votes but serves no API; call a full member"))
	}
	if id.Key != "" && !a.limiter(id.Key).Allow() {
		return nil, rpcerr.ToConnect(apierr.New(apierr.ResourceExhausted, "%s is over its rate limit of %.0f calls/s; slow down and retry", id.Name, float64(a.rate)))
	}
	return context.WithValue(ctx, identityKey{}, id), nil
}

func (a *Authorizer) limiter(key string) *rate.Limiter {
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

// Interceptor applies the authorizer to unary and streaming calls.
func (a *Authorizer) Interceptor() connect.Interceptor { return authInterceptor{a} }

type authInterceptor struct{ a *Authorizer }

// The API's calls arrive authorised by the Manager's gate
// (internal/manager/gate.go), from their headers, before their bodies were
// read: the interceptor authorises only a call that did not pass it.

func (i authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if _, ok := CallerOf(ctx); ok {
			return next(ctx, req)
		}
		ctx, err := i.a.Authorize(ctx, req.Spec().Procedure, req.Header().Get(AuthorizationHeader))
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
		if _, ok := CallerOf(ctx); ok {
			return next(ctx, conn)
		}
		ctx, err := i.a.Authorize(ctx, conn.Spec().Procedure, conn.RequestHeader().Get(AuthorizationHeader))
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// MayReadSecrets reports whether the caller may see the registration tokens
// of cluster slots in ListClusterNodes (operators hand them to workers;
// read-only callers see them blanked; events never carry them).
func MayReadSecrets(ctx context.Context) bool {
	id, ok := CallerOf(ctx)
	return ok && id.Can(managerv1.Permission_PERMISSION_OPERATE)
}
