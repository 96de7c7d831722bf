package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/ratelimitheader"
)

// DefaultTrustedProxies are the peers whose forwarding headers /v1/auth
// believes when Options.TrustedProxies is nil: loopback only.
var DefaultTrustedProxies = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
}

// authPrefix starts the forward-auth calls that carry the original path in
// their own (Envoy ext_authz with path_prefix /v1/auth).
const authPrefix = "/v1/auth/"

// handleAuth is the forward-auth endpoint for proxies (nginx auth_request,
// Traefik ForwardAuth, Caddy forward_auth, Envoy ext_authz over HTTP). The
// request to limit is described by the proxy's headers, or for ext_authz by
// the method and the path after /v1/auth; the answer is 200,
// 429 or 503 with the RateLimit headers and no JSON to parse.
func (s *Server) handleAuth(w http.ResponseWriter, r *http.Request) {
	req := s.authRequest(r)
	res := s.check.Check(r.Context(), req)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if res.BadRequest != nil {
		// Refused as bad input, as /v1/check's 400: no limit to report.
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(res.BadRequest.Error() + "\n"))
		return
	}
	ratelimitheader.Set(w.Header(), &res)
	switch {
	case res.FailClosed:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("rate limiter unavailable\n"))
	case !res.Allowed:
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte("too many requests\n"))
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// authRequest builds the request to limit from a forward-auth call.
// Forwarding headers are believed only when the peer is a trusted proxy;
// otherwise the request describes the peer's own call.
func (s *Server) authRequest(r *http.Request) *host.CheckRequest {
	peer := peerAddr(r.RemoteAddr)
	trusted := peer.IsValid() && s.trusted(peer)
	hdr := func(name string) string {
		if !trusted {
			return ""
		}
		return strings.TrimSpace(r.Header.Get(name))
	}
	req := &host.CheckRequest{Hits: 1}
	in := &req.Request
	in.Method = firstNonEmpty(hdr("X-Original-Method"), hdr("X-Forwarded-Method"), r.Method)
	own := r.URL.RequestURI()
	if rest, ok := strings.CutPrefix(own, authPrefix); ok {
		own = "/" + rest // Envoy ext_authz: /v1/auth/<original path>
	}
	uri := firstNonEmpty(hdr("X-Original-URI"), hdr("X-Forwarded-Uri"), own)
	if u, err := url.ParseRequestURI(uri); err == nil {
		in.Path = u.Path
		if q := u.Query(); len(q) > 0 {
			in.Query = make(map[string]string, len(q))
			for k, v := range q {
				in.Query[k] = v[0]
			}
		}
	} else {
		in.Path = uri
	}
	// The proxy's request id names the request's in-flight slots (a
	// proxy that cannot release them leaves them to their ttl).
	if id := hdr("X-Request-Id"); host.CheckDedupID(id) == nil {
		req.LeaseID = id
	}
	in.Host = firstNonEmpty(hdr("X-Forwarded-Host"), r.Host)
	in.User = firstNonEmpty(hdr("X-Forwarded-User"), hdr("X-Auth-Request-User"))
	in.IP = s.clientIP(r, peer, trusted)
	in.Headers = make(map[string]string, len(r.Header))
	for k, v := range r.Header {
		in.Headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	return req
}

// clientIP is X-Real-IP, else the right-most address in X-Forwarded-For
// that is not a trusted proxy, else the peer.
func (s *Server) clientIP(r *http.Request, peer netip.Addr, trusted bool) string {
	if trusted {
		if ip, err := netip.ParseAddr(strings.TrimSpace(r.Header.Get("X-Real-IP"))); err == nil {
			return ip.Unmap().String()
		}
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			ip, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break
			}
			if ip = ip.Unmap(); i == 0 || !s.trusted(ip) {
				return ip.String()
			}
		}
	}
	if peer.IsValid() {
		return peer.String()
	}
	return ""
}

func (s *Server) trusted(ip netip.Addr) bool {
	for _, p := range s.trustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func peerAddr(remote string) netip.Addr {
	h, _, err := net.SplitHostPort(remote)
	if err != nil {
		h = remote
	}
	ip, err := netip.ParseAddr(h)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap()
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
