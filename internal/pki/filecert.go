package pki

import (
	"crypto/tls"
	"log/slog"
	"os"
	"sync"
	"time"
)

// FileCert serves an operator's certificate and key files, reading them
// again when they change (checked at most every 10 s), so a renewed
// certificate needs no restart. Its methods are safe for concurrent use.
type FileCert struct {
	certPath, keyPath string
	log               *slog.Logger

	mu      sync.Mutex
	cur     *tls.Certificate
	mod     [2]time.Time
	checked time.Time
}

// NewFileCert serves the pair at certPath and keyPath; Load reads it first.
func NewFileCert(certPath, keyPath string, log *slog.Logger) *FileCert {
	return &FileCert{certPath: certPath, keyPath: keyPath, log: log}
}

// Load reads the pair now.
func (f *FileCert) Load() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(f.certPath, f.keyPath)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.cur, f.mod, f.checked = &c, f.modTimes(), time.Now()
	f.mu.Unlock()
	return &c, nil
}

func (f *FileCert) modTimes() [2]time.Time {
	var out [2]time.Time
	for i, p := range []string{f.certPath, f.keyPath} {
		if st, err := os.Stat(p); err == nil {
			out[i] = st.ModTime()
		}
	}
	return out
}

// Get is the pair as last read, read again first when its files have
// changed; a pair that no longer reads is logged and the last one served
// (tls.Config.GetCertificate's shape, less the hello).
func (f *FileCert) Get() (*tls.Certificate, error) {
	f.mu.Lock()
	cur := f.cur
	stale := time.Since(f.checked) > 10*time.Second
	if stale {
		f.checked = time.Now()
	}
	changed := stale && f.modTimes() != f.mod
	f.mu.Unlock()
	if changed {
		if c, err := f.Load(); err != nil {
			f.log.Warn("TLS: cannot reload the API certificate; serving the previous one", "cert", f.certPath, "err", err)
		} else {
			f.log.Info("TLS: reloaded the API certificate", "cert", f.certPath, "expires", c.Leaf.NotAfter)
			cur = c
		}
	}
	return cur, nil
}
