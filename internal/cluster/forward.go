package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/norsk-go/norsk-manager/internal/store"
)

// errLeaderMoved ends a forwarded call whose primary this member no longer
// follows.
var errLeaderMoved = errors.New("the primary changed")

// WatchLeader bounds a call to leader: the returned context ends as soon as
// this member stops following it (raft lost it, or elected another), so a
// call to a primary that died does not hang until the caller's deadline.
// sent reports whether the request reached the wire; done stops the watch
// and reports whether it ended the call.
func WatchLeader(ctx context.Context, st *store.Store, leader string) (context.Context, *atomic.Bool, func() bool) {
	cctx, cancel := context.WithCancelCause(ctx)
	sent := new(atomic.Bool)
	cctx = httptrace.WithClientTrace(cctx, &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }})
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(leaderPoll)
		defer t.Stop()
		for {
			changed := st.LeaderChanged()
			if l, _ := st.Leader(); l != leader {
				cancel(errLeaderMoved)
				return
			}
			select {
			case <-stop:
				return
			case <-cctx.Done():
				return
			case <-changed:
			case <-t.C: // an observation raft dropped
			}
		}
	}()
	return cctx, sent, func() bool {
		close(stop)
		<-finished
		moved := errors.Is(context.Cause(cctx), errLeaderMoved)
		cancel(nil)
		return moved
	}
}

// leaderPoll is how often a forwarded call checks that its primary is
// still the one this member follows, besides raft's leader observations.
const leaderPoll = 250 * time.Millisecond

// ForwardedValue is a command's answer in a form Forward can carry: a
// protobuf message as it is, a count or an index wrapped.
func ForwardedValue(v any) (proto.Message, bool) {
	switch v := v.(type) {
	case proto.Message:
		return v, true
	case uint64:
		return wrapperspb.UInt64(v), true
	case int:
		return wrapperspb.Int64(int64(v)), true
	}
	return nil, false
}

// FromForwarded undoes ForwardedValue.
func FromForwarded(m proto.Message) any {
	switch m := m.(type) {
	case *wrapperspb.UInt64Value:
		return m.GetValue()
	case *wrapperspb.Int64Value:
		return int(m.GetValue())
	}
	return m
}

// IsDialErr reports whether err is a failure to connect (the request was
// never sent).
func IsDialErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// HTTPClient dials other members: HTTP/2 (cleartext with prior knowledge,
// or over TLS trusting the system roots and the cluster CA ca, if any).
func HTTPClient(ca *x509.Certificate) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if ca != nil {
		roots.AddCert(ca)
	}
	return &http.Client{Transport: &http.Transport{
		Protocols:       &p,
		DialContext:     (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 10 * time.Second}).DialContext,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots},
		HTTP2:           &http.HTTP2Config{PingTimeout: 5 * time.Second, SendPingTimeout: 5 * time.Second},
	}}
}
