package daemon

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/vstellar/vstellar/api"
)

// Listing bounds: a device may have a million MRs; an answer lists at
// most maxListLimit of them and says how many there are.
const (
	defaultListLimit = 1000
	maxListLimit     = 100000
)

// pathDevice validates the {name} of a request and returns the ready
// device, or writes the error answer and returns nil.
func (m *Manager) pathDevice(w http.ResponseWriter, r *http.Request) *device {
	name := r.PathValue("name")
	if err := api.ValidateName(name); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return nil
	}
	d, err := m.readyDevice(name)
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return nil
	}
	return d
}

func (m *Manager) handleStats(w http.ResponseWriter, r *http.Request) {
	if d := m.pathDevice(w, r); d != nil {
		writeJSON(w, http.StatusOK, d.state().Status())
	}
}

// listLimit reads ?limit=N (1..maxListLimit).
func listLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return defaultListLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxListLimit {
		return 0, fmt.Errorf("%w: limit %q: want 1..%d", api.ErrInvalid, v, maxListLimit)
	}
	return n, nil
}

// handleList serves a device's listing: list reads it from the open
// model. A model that shows nothing (or is being destroyed) lists
// nothing.
func handleListing[T, S any](m *Manager, w http.ResponseWriter, r *http.Request,
	list func(Inspector) []T, conv func(T) S, answer func(total int, items []S) any) {
	limit, err := listLimit(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	d := m.pathDevice(w, r)
	if d == nil {
		return
	}
	var all []T
	d.inspect(func(in Inspector) { all = list(in) })
	items := make([]S, 0, min(len(all), limit))
	for _, x := range all[:min(len(all), limit)] {
		items = append(items, conv(x))
	}
	writeJSON(w, http.StatusOK, answer(len(all), items))
}

func (m *Manager) handleQPs(w http.ResponseWriter, r *http.Request) {
	handleListing(m, w, r, Inspector.QPs, qpStatus,
		func(n int, qps []api.QPStatus) any { return api.QPList{Total: n, QPs: qps} })
}

func (m *Manager) handleMRs(w http.ResponseWriter, r *http.Request) {
	handleListing(m, w, r, Inspector.MRs, mrStatus,
		func(n int, mrs []api.MRStatus) any { return api.MRList{Total: n, MRs: mrs} })
}
