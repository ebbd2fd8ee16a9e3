package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"

	"github.com/vstellar/vstellar/api"
)

// maxRequestBody bounds API request bodies.
const maxRequestBody = 64 << 10

// Handler returns the management API:
//
//	GET    /v1/health          200 api.Health (503 while shutting down)
//	GET    /v1/devices         200 api.DeviceList
//	POST   /v1/devices         201 api.DeviceInfo; body api.DeviceSpec
//	GET    /v1/devices/{name}  200 api.DeviceInfo
//	DELETE /v1/devices/{name}  204
//	GET    /v1/devices/{name}/stats  200 api.DeviceStatus
//	GET    /v1/devices/{name}/qps    200 api.QPList (?limit=N, default 1000)
//	GET    /v1/devices/{name}/mrs    200 api.MRList (?limit=N, default 1000)
//	GET    /v1/host            200 api.HostStatus
//	GET    /v1/host/nics       200 api.NICList
//	GET    /v1/host/paths      200 api.PathList (404 without a fabric)
//
// Errors are {"error": "..."} (api.ErrorBody) with 400, 404, 405, 409, 413, 415, 500 or 503.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", m.handleHealth)
	mux.HandleFunc("GET /v1/devices", m.handleList)
	mux.HandleFunc("POST /v1/devices", m.handleCreate)
	mux.HandleFunc("GET /v1/devices/{name}", m.handleGet)
	mux.HandleFunc("DELETE /v1/devices/{name}", m.handleDestroy)
	mux.HandleFunc("GET /v1/devices/{name}/stats", m.handleStats)
	mux.HandleFunc("GET /v1/devices/{name}/qps", m.handleQPs)
	mux.HandleFunc("GET /v1/devices/{name}/mrs", m.handleMRs)
	mux.HandleFunc("GET /v1/host", m.handleHost)
	mux.HandleFunc("GET /v1/host/nics", m.handleNICs)
	mux.HandleFunc("GET /v1/host/paths", m.handlePaths)
	return jsonFallback(mux)
}

// jsonFallback turns the mux's own plain-text 404 and 405 answers into
// JSON errors, keeping their status and Allow header.
func jsonFallback(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		for _, h := range []string{"Allow", "Location"} { // 405s and the mux's path-cleaning redirects
			if v := rec.header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		msg := http.StatusText(rec.code)
		if rec.code == http.StatusNotFound {
			// Quoted: the path is the client's and may hold a newline.
			msg = fmt.Sprintf("no such endpoint: %s %q", r.Method, r.URL.Path)
		}
		writeError(w, rec.code, msg)
	})
}

// statusRecorder keeps the status and headers of the mux's fallback
// answers and drops their plain-text body.
type statusRecorder struct {
	header http.Header
	code   int
}

func (s *statusRecorder) Header() http.Header         { return s.header }
func (s *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusRecorder) WriteHeader(code int)        { s.code = code }

func (m *Manager) handleHealth(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	closing := m.closing
	m.mu.Unlock()
	h := api.Health{Status: "ok", Devices: len(m.Devices())}
	status := http.StatusOK
	if closing {
		h.Status, status = "shutting down", http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

func (m *Manager) handleList(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.DeviceList{Devices: m.Devices()})
}

func (m *Manager) handleCreate(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: want application/json", ct))
			return
		}
	}
	var spec api.DeviceSpec
	if err := decodeStrict(http.MaxBytesReader(w, r.Body, maxRequestBody), &spec); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", maxRequestBody))
			return
		}
		writeError(w, http.StatusBadRequest, "bad device spec: "+err.Error())
		return
	}
	info, err := m.CreateDevice(r.Context(), spec)
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	w.Header().Set("Location", "/v1/devices/"+info.Name)
	writeJSON(w, http.StatusCreated, info)
}

func (m *Manager) handleGet(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := api.ValidateName(name); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, err := m.Device(name)
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (m *Manager) handleDestroy(w http.ResponseWriter, r *http.Request) {
	if err := m.DestroyDevice(r.Context(), r.PathValue("name")); err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, api.ErrorBody{Error: msg})
}
