package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/sdk"
)

// Admin is what the admin endpoints operate on; *host.Engine implements it.
type Admin interface {
	Status() host.LoadStatus
	// Reload loads the rules again, logging the outcome with trigger.
	Reload(ctx context.Context, trigger string) (int, error)
	// Inspect reports on the rules and plugins.
	Inspect() *host.Inspector
	// Counters operate on what the rules count.
	Counters() *host.Counters
}

// bearerToken returns the token of an Authorization header of the Bearer
// scheme. The scheme is case-insensitive (RFC 9110 section 11.1, RFC 6750
// section 2.1): "bearer", "Bearer" and "BEARER" all name it.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// hasToken reports whether r carries token as its bearer token (compared
// in constant time); never for an empty token.
func hasToken(r *http.Request, token string) bool {
	got, ok := bearerToken(r.Header.Get("Authorization"))
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// mountAdmin adds the admin endpoints, each behind the bearer token. With
// no token only the read-only ones are mounted, for loopback requests only
// (Options.LoopbackStatus).
func (s *Server) mountAdmin(a Admin, token string, stats func(context.Context) any) {
	guard := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !hasToken(r, token) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ruled admin"`)
				writeError(w, &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "admin endpoints need Authorization: Bearer <admin token>"})
				return
			}
			h(w, r)
		}
	}
	readOnly := guard
	if token == "" {
		readOnly = loopbackOnly
	}
	s.mux.HandleFunc("GET /v1/admin/rules", readOnly(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, rulesAnswer(a))
	}))
	s.mux.HandleFunc("GET /v1/admin/plugins", readOnly(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"plugins": pluginsAnswer(a.Inspect().PluginInfos(), a.Inspect().PluginStatuses())})
	}))
	if stats != nil {
		s.mux.HandleFunc("GET /v1/admin/stats", readOnly(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, stats(r.Context()))
		}))
	}
	s.mountCounters(a, readOnly)
	if token == "" {
		return
	}
	s.mountClearCounters(a, guard)
	s.mux.HandleFunc("POST /v1/admin/reload", guard(func(w http.ResponseWriter, r *http.Request) {
		n, err := a.Reload(context.WithoutCancel(r.Context()), "admin API")
		if err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
				"error":  &Error{Code: "invalid_rules", Message: "the new rules are invalid; the previous rules keep serving"},
				"errors": host.LoadErrors(err),
			})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"rules": n})
	}))
	s.mux.HandleFunc("POST /v1/admin/reset", guard(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Rule    string `json:"rule"`
			Subject string `json:"subject"`
		}
		if e := decodeJSON(w, r, &body); e != nil {
			writeError(w, e)
			return
		}
		if body.Rule == "" {
			writeError(w, newBadRequest("invalid_field", "rule: required"))
			return
		}
		n, err := a.Counters().Reset(r.Context(), body.Rule, body.Subject)
		if e := adminError(err, "reset_failed"); e != nil {
			writeError(w, e)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"deleted_keys": n})
	}))
}

// adminError is the answer for an error of an admin call on one rule
// (Reset, Counters, ClearCounters): nil for none, 404 unknown_rule for a
// rule that does not exist, 400 for a bad cursor, else 503 with code.
func adminError(err error, code string) *Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, host.ErrNoRule):
		return &Error{Status: http.StatusNotFound, Code: "unknown_rule", Message: err.Error()}
	case errors.Is(err, host.ErrBadCursor):
		return newBadRequest("invalid_field", "cursor: not a next_cursor of this endpoint")
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: code, Message: err.Error()}
}

type statusAnswer struct {
	Path        string           `json:"path"`
	Rules       int              `json:"rules"`
	LoadedAt    time.Time        `json:"loaded_at"`
	Loads       int64            `json:"loads"`
	Failures    int64            `json:"failures"`
	LastError   []host.LoadError `json:"last_error,omitempty"`
	LastErrorAt *time.Time       `json:"last_error_at,omitempty"`
}

func rulesAnswer(a Admin) map[string]any {
	st := a.Status()
	sa := statusAnswer{Path: st.Path, Rules: st.Rules, LoadedAt: st.LoadedAt, Loads: st.Loads, Failures: st.Failures}
	if st.LastError != nil {
		sa.LastError = host.LoadErrors(st.LastError)
		sa.LastErrorAt = &st.LastErrorAt
	}
	return map[string]any{"status": sa, "rules": a.Inspect().RuleInfos()}
}

type pluginAnswer struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Scripts  []string `json:"scripts"`
	Commands []string `json:"commands"`
	// Traits are the shortcuts the plugin allows (docs/rules.md, "Shortcuts").
	Traits []string `json:"traits"`
	// Status is "ok" or why the plugin cannot decide.
	Status string `json:"status"`
}

func pluginsAnswer(infos []sdk.Info, statuses []host.PluginStatus) []pluginAnswer {
	status := make(map[string]string, len(statuses))
	for _, ps := range statuses {
		if ps.Err != nil {
			status[ps.Name] = ps.Err.Error()
		}
	}
	out := make([]pluginAnswer, len(infos))
	for i, in := range infos {
		pa := pluginAnswer{Name: in.Name, Version: in.Version, Scripts: []string{}, Commands: []string{}, Traits: in.Traits.Names(), Status: "ok"}
		if st, bad := status[in.Name]; bad {
			pa.Status = st
		}
		seen := map[string]bool{}
		for _, s := range in.Scripts {
			pa.Scripts = append(pa.Scripts, s.Name)
			for _, c := range s.Commands {
				if !seen[c] {
					seen[c] = true
					pa.Commands = append(pa.Commands, c)
				}
			}
		}
		out[i] = pa
	}
	return out
}

// loopbackOnly lets a request through only when it comes from a loopback
// peer and names a loopback host: "localhost", "127.0.0.1", "[::1]", with
// or without a port. Checking the Host header defeats DNS rebinding, where
// a web page makes the browser send requests for its own name to 127.0.0.1.
func loopbackOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !loopbackPeer(r.RemoteAddr) || !loopbackHost(r.Host) {
			writeError(w, &Error{Status: http.StatusForbidden, Code: "forbidden",
				Message: "without --admin-token the status endpoints answer only loopback requests to a loopback host name"})
			return
		}
		h(w, r)
	}
}

func loopbackPeer(remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
