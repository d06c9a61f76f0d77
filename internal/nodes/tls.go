package nodes

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	managerv1 "github.com/norsk-go/norsk-manager/api/gen/norsk/manager/v1"
)

// dialTarget is the HTTP client and base URL of a node's stream: mutual TLS
// (https) when its worker serves with a certificate the cluster CA signed
// (Node.tls), cleartext HTTP/2 otherwise.
func (cn *conn) dialTarget(node *managerv1.Node) (*http.Client, string, error) {
	cfg := &cn.c.cfg
	if !node.GetTls() {
		return cfg.HTTPClient, "http://" + node.GetAddress(), nil
	}
	if cfg.WorkerTLS == nil {
		return nil, "", fmt.Errorf("the worker of node %s serves TLS, and this Manager has no cluster CA to dial it with (is its TLS off?)", cn.nodeID)
	}
	if cn.tlsClient == nil {
		cn.tlsClient = TLSClient(cfg.WorkerTLS(cn.nodeID))
	}
	return cn.tlsClient, "https://" + node.GetAddress(), nil
}

// closeTLS releases the TLS client's connections.
func (cn *conn) closeTLS() {
	if cn.tlsClient != nil {
		cn.tlsClient.CloseIdleConnections()
		cn.tlsClient = nil
	}
}

// TLSClient is an HTTP client speaking HTTP/2 over TLS with cfg, for a
// worker's long-lived stream.
func TLSClient(cfg *tls.Config) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:           &p,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 10 * time.Second,
		// A worker's stream is long-lived; idle pings detect a dead peer.
		HTTP2: &http.HTTP2Config{PingTimeout: 10 * time.Second, SendPingTimeout: 15 * time.Second},
	}}
}
