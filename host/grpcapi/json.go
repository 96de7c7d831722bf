package grpcapi

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// MaxJSONBody bounds the body of a JSON rate limit request.
const MaxJSONBody = 1 << 20

// jsonBuffers hold the answers appendJSONResponse writes.
var jsonBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// JSONHandler serves envoy ratelimit's POST /json: a RateLimitRequest in
// protobuf's JSON form, answered by the service as over gRPC with the
// RateLimitResponse in the same form: 200, or 429 when over the limit;
// 400 for a body that is not a request (or over MaxJSONBody), or one the
// service refuses.
func JSONHandler(s *RateLimitService, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a RateLimitRequest as JSON", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, "request body over 1 MiB", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		req, ok := parseJSONRequest(body)
		if !ok {
			req = &rlsv3.RateLimitRequest{}
			if err := protojson.Unmarshal(body, req); err != nil {
				http.Error(w, "not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		resp, err := s.ShouldRateLimit(r.Context(), req)
		if err != nil {
			log.Debug("json rate limit request refused", "err", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		buf := jsonBuffers.Get().(*[]byte)
		defer jsonBuffers.Put(buf)
		out, ok := appendJSONResponse((*buf)[:0], resp)
		if ok {
			*buf = out
		} else if out, err = protojson.Marshal(resp); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}
