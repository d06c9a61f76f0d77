package chapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// VMM is what serves the API's endpoints behind Handler: a local VMM
// (internal/chsim) or the QEMU backend (internal/chqemu). Each method
// answers its endpoint in full with Write or WriteError; Handler has
// checked the path and the method.
type VMM interface {
	Ping() VmmPingResponse
	// ShutdownVMM ends the VMM; Handler calls it once the 204 is sent.
	ShutdownVMM()
	Create(w http.ResponseWriter, r *http.Request)
	Boot(w http.ResponseWriter, r *http.Request)
	Info(w http.ResponseWriter, r *http.Request)
	ShutdownVM(w http.ResponseWriter, r *http.Request)
	Delete(w http.ResponseWriter, r *http.Request)
}

// endpoints are the ones served, with their method; every other endpoint
// of the real API answers 404 here as an unknown one does there.
var endpoints = map[string]string{
	"vmm.ping": http.MethodGet, "vmm.shutdown": http.MethodPut,
	"vm.create": http.MethodPut, "vm.boot": http.MethodPut, "vm.info": http.MethodGet,
	"vm.shutdown": http.MethodPut, "vm.delete": http.MethodPut,
}

// Handler serves Cloud Hypervisor's REST API under Root on v, as
// `cloud-hypervisor --api-socket` does: an unknown endpoint is 404 with no
// body, a known one with the wrong method 400.
func Handler(v VMM) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep, ok := strings.CutPrefix(r.URL.Path, Root+"/")
		method, known := endpoints[ep]
		if !ok || !known {
			Write(w, http.StatusNotFound, nil)
			return
		}
		if r.Method != method {
			WriteError(w, http.StatusBadRequest, "Bad Request")
			return
		}
		switch ep {
		case "vmm.ping":
			WriteJSON(w, http.StatusOK, v.Ping())
		case "vmm.shutdown":
			Write(w, http.StatusNoContent, nil)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			go v.ShutdownVMM()
		case "vm.create":
			v.Create(w, r)
		case "vm.boot":
			v.Boot(w, r)
		case "vm.info":
			v.Info(w, r)
		case "vm.shutdown":
			v.ShutdownVM(w, r)
		case "vm.delete":
			v.Delete(w, r)
		}
	})
}

// Write answers status with body (nil = none).
func Write(w http.ResponseWriter, status int, body []byte) {
	if body != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	if body != nil {
		_, _ = w.Write(body)
	}
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, "Internal Server Error", err.Error())
		return
	}
	Write(w, status, b)
}

// WriteError answers the VMM's error answer: status and the error chain.
func WriteError(w http.ResponseWriter, status int, msgs ...string) {
	Write(w, status, ErrorBody(msgs...))
}

// ReadVmConfig decodes a vm.create body (at most 4 MiB); when it cannot,
// it has answered 400 as the real VMM does, and ok is false.
func ReadVmConfig(w http.ResponseWriter, r *http.Request) (cfg VmConfig, ok bool) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err == nil {
		err = json.Unmarshal(b, &cfg)
	}
	if err != nil {
		WriteError(w, http.StatusBadRequest, "Failed to deserialize JSON", err.Error())
		return VmConfig{}, false
	}
	return cfg, true
}

// WriteCreateRefused answers a vm.create the VMM refuses: a VM that exists
// already (err nil: 500, as the real VMM answers), a configuration
// Validate refuses (400, or 409 for a ConflictError).
func WriteCreateRefused(w http.ResponseWriter, err error) {
	if err == nil {
		WriteError(w, http.StatusInternalServerError, "Error from API", "The VM could not be created", "The VM is already created")
		return
	}
	status := http.StatusBadRequest
	var ce *ConflictError
	if errors.As(err, &ce) {
		status = http.StatusConflict
	}
	WriteError(w, status, "Error from API", "The VM could not be created", err.Error())
}

// Server serves a VMM's API on its Unix socket, as one cloud-hypervisor
// process does on --api-socket.
type Server struct {
	socket string
	srv    *http.Server
	done   chan struct{}
}

// Listen replaces a stale socket file, listens on socket and serves v
// until Shutdown; log hears a server that ends on its own.
func Listen(socket string, v VMM, log *slog.Logger) (*Server, error) {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	s := &Server{socket: socket, srv: &http.Server{Handler: Handler(v), ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("VMM API server ended", "err", err)
		}
	}()
	return s, nil
}

// Done is closed once the server has ended.
func (s *Server) Done() <-chan struct{} { return s.done }

// Shutdown stops serving (calls in flight get 5 s), waits for the server
// to end and removes the socket file.
func (s *Server) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	_ = os.Remove(s.socket)
	return err
}
