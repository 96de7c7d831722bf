package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/go-json-experiment/json"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ruled-dev/ruled/host"
)

// In-flight slots through Envoy. A descriptor with a lease_id entry (Envoy
// sets it from x-request-id) acquires the slots of the rules it matches
// whose plugins declare releases. When some are held, the answer carries a
// release token in its dynamic_metadata (ReleaseMetadataKey), which Envoy's
// rate limit filter keeps in the request's dynamic metadata under
// RateLimitFilterNamespace. Envoy's gRPC access log service sends that
// metadata with the request's log entry when the request is done, and
// AccessLogService releases the slots the token names. The token names the
// descriptors and is signed with the fleet's lease key, so any instance
// can release it and nobody can forge one.

// ReleaseMetadataKey is the dynamic_metadata field of a rate limit answer
// that holds the release token of its in-flight slots.
const ReleaseMetadataKey = "ruled_release"

// RateLimitFilterNamespace is the dynamic metadata namespace under which
// Envoy's rate limit filter keeps an answer's dynamic_metadata.
const RateLimitFilterNamespace = "envoy.filters.http.ratelimit"

// Releaser frees in-flight slots (*host.Engine is one).
type Releaser interface {
	Release(ctx context.Context, req *host.CheckRequest) host.Result
}

// Holds let the rate limit service release the in-flight slots it grants
// when Envoy logs the request done.
type Holds struct {
	Signer   host.Sealer // *host.ClientLeases: the fleet's lease key
	Releaser Releaser
}

// releaseKind is what a release token is sealed as (host.Seal), so that
// no other string sealed with the fleet's key (a client lease) is one.
const releaseKind = "ruled-release-v1\x00"

// releaseToken is what a release token holds: the domain and, for each
// descriptor that holds slots, its entries as key, value, key, value...
// (lease_id among them).
type releaseToken struct {
	Domain      string     `json:"d"`
	Descriptors [][]string `json:"e"`
}

// releaseTokenFor returns the signed release token of the descriptors of
// req whose results hold slots, or "" when none does.
func releaseTokenFor(ctx context.Context, sig host.Sealer, req *rlsv3.RateLimitRequest, results []host.Result) (string, error) {
	var t releaseToken
	for i := range results {
		if !results[i].Held() {
			continue
		}
		var kv []string
		for _, e := range req.GetDescriptors()[i].GetEntries() {
			kv = append(kv, e.GetKey(), e.GetValue())
		}
		t.Descriptors = append(t.Descriptors, kv)
	}
	if t.Descriptors == nil {
		return "", nil
	}
	t.Domain = req.GetDomain()
	data, err := json.Marshal(&t)
	if err != nil { // strings always marshal
		panic(err)
	}
	tok, err := host.Seal(ctx, sig, releaseKind, data)
	if err != nil {
		return "", fmt.Errorf("signing a release token: %w", err)
	}
	return tok, nil
}

// errBadReleaseToken is the error of a token that is not one.
var errBadReleaseToken = errors.New("not a release token this fleet gave")

// decodeReleaseToken verifies s (host.ErrLeaseForged when its MAC does
// not) and returns the descriptors it names, each ready to release.
func decodeReleaseToken(ctx context.Context, sig host.Sealer, s string) ([]*host.CheckRequest, error) {
	data, err := host.Unseal(ctx, sig, releaseKind, s)
	if errors.Is(err, host.ErrNotSealed) {
		return nil, fmt.Errorf("%w: %w", errBadReleaseToken, err)
	}
	if err != nil {
		return nil, err
	}
	var t releaseToken
	if err := json.Unmarshal(data, &t, json.RejectUnknownMembers(true)); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadReleaseToken, err)
	}
	if len(t.Descriptors) > MaxDescriptors {
		return nil, fmt.Errorf("%w: %d descriptors", errBadReleaseToken, len(t.Descriptors))
	}
	reqs := make([]*host.CheckRequest, 0, len(t.Descriptors))
	for i, kv := range t.Descriptors {
		if len(kv)%2 != 0 {
			return nil, fmt.Errorf("%w: descriptor %d has an entry without a value", errBadReleaseToken, i)
		}
		d := &rlcommonv3.RateLimitDescriptor{}
		for j := 0; j < len(kv); j += 2 {
			d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[j], Value: kv[j+1]})
		}
		cr := &host.CheckRequest{}
		if err := describe(cr, t.Domain, d); err != nil || cr.LeaseID == "" {
			return nil, fmt.Errorf("%w: descriptor %d: %v", errBadReleaseToken, i, err)
		}
		reqs = append(reqs, cr)
	}
	return reqs, nil
}

// AccessLogService is Envoy's gRPC access log service: for each HTTP log
// entry whose metadata carries a release token (ReleaseMetadataKey under
// RateLimitFilterNamespace), it releases the in-flight slots the token
// names. Other entries, and TCP logs, are read and dropped.
type AccessLogService struct {
	alsv3.UnimplementedAccessLogServiceServer
	holds Holds
	log   *slog.Logger
}

// NewAccessLogService returns the access log service releasing through h.
func NewAccessLogService(h Holds, log *slog.Logger) *AccessLogService {
	return &AccessLogService{holds: h, log: log}
}

// StreamAccessLogs releases the slots of each logged request as its entry
// arrives, one entry after another. Releases go on when Envoy closes the
// stream: a slot a request held is freed whatever happens to the stream
// after its entry arrived.
func (a *AccessLogService) StreamAccessLogs(stream alsv3.AccessLogService_StreamAccessLogsServer) error {
	ctx := context.WithoutCancel(stream.Context())
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&alsv3.StreamAccessLogsResponse{})
		}
		if err != nil {
			return err
		}
		for _, e := range msg.GetHttpLogs().GetLogEntry() {
			if tok := releaseTokenOf(e); tok != "" {
				a.release(ctx, tok)
			}
		}
	}
}

// releaseTokenOf is the release token in e's metadata, or "".
func releaseTokenOf(e *accesslogv3.HTTPAccessLogEntry) string {
	md := e.GetCommonProperties().GetMetadata().GetFilterMetadata()[RateLimitFilterNamespace]
	return md.GetFields()[ReleaseMetadataKey].GetStringValue()
}

// release frees the slots tok names. A token that does not verify, or a
// release that fails, is logged at DEBUG only, since whoever reaches the
// listener could set off as many as it likes (the slots of a failed
// release come back when their leases expire).
func (a *AccessLogService) release(ctx context.Context, tok string) {
	reqs, err := decodeReleaseToken(ctx, a.holds.Signer, tok)
	if err != nil {
		a.log.Debug("access log: release token refused", "err", err)
		return
	}
	for _, cr := range reqs {
		res := a.holds.Releaser.Release(ctx, cr)
		for _, rr := range res.Results {
			if rr.Err != nil {
				a.log.Debug("access log: release failed; the slot comes back when its lease expires", "rule", rr.Rule, "err", rr.Err)
			}
		}
	}
}

// releaseMetadata is the dynamic_metadata of an answer with tok.
func releaseMetadata(tok string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{ReleaseMetadataKey: structpb.NewStringValue(tok)}}
}
