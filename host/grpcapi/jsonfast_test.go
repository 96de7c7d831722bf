package grpcapi

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// randomResponse is a response with random fields. It reports whether it
// kept to what appendJSONResponse writes: fields it knows, named enum
// values, valid durations and UTF-8.
func randomResponse(r *rand.Rand) (*rlsv3.RateLimitResponse, bool) {
	plain := true
	odd := func() bool { return r.IntN(40) == 0 }
	str := func() string {
		switch r.IntN(6) {
		case 0:
			return ""
		case 1:
			return "a\"b\\c\n\x01<>&é\u2028日本"
		case 2:
			if odd() {
				plain = false
				return "bad \xff utf-8"
			}
		}
		return "rule-" + strings.Repeat("x", r.IntN(5))
	}
	code := func() rlsv3.RateLimitResponse_Code {
		if odd() {
			plain = false
			return 7 // no name
		}
		return rlsv3.RateLimitResponse_Code(r.IntN(3))
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: code()}
	for range r.IntN(4) {
		s := &rlsv3.RateLimitResponse_DescriptorStatus{Code: code(), LimitRemaining: r.Uint32() >> r.IntN(33)}
		if r.IntN(4) > 0 {
			unit := rlsv3.RateLimitResponse_RateLimit_Unit(r.IntN(8))
			if odd() {
				unit, plain = 99, false
			}
			s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: str(), RequestsPerUnit: r.Uint32() >> r.IntN(33), Unit: unit}
			if odd() {
				s.CurrentLimit.UnitMultiplier, plain = wrapperspb.UInt32(3), false
			}
		}
		if r.IntN(4) > 0 {
			secs := r.Int64N(100_000) - 10
			nanos := []int32{0, 500_000_000, 1_000_000, 1_000, 1, 999_999_999, 120_000_000}[r.IntN(7)]
			if secs < 0 {
				nanos = -nanos
			}
			if odd() {
				secs, plain = 315_576_000_001, false
			}
			s.DurationUntilReset = &durationpb.Duration{Seconds: secs, Nanos: nanos}
		}
		if odd() {
			s.Quota, plain = &rlsv3.RateLimitResponse_Quota{Requests: 1}, false
		}
		resp.Statuses = append(resp.Statuses, s)
	}
	for range r.IntN(3) {
		h := &corev3.HeaderValue{Key: str(), Value: str()}
		if odd() {
			h.RawValue, plain = []byte("raw"), false
		}
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, h)
	}
	if r.IntN(5) == 0 {
		resp.RequestHeadersToAdd = append(resp.RequestHeadersToAdd, &corev3.HeaderValue{Key: "x-ruled", Value: str()})
	}
	switch r.IntN(60) {
	case 0:
		resp.RawBody, plain = []byte("body"), false
	case 1:
		resp.DynamicMetadata, plain = &structpb.Struct{}, false
	case 2:
		resp.Quota, plain = &rlsv3.RateLimitResponse_Quota{Requests: 2}, false
	}
	return resp, plain
}

// TestAppendJSONResponseMatchesProtojson holds the hand-written answer to
// protojson's: the same JSON values for every response it writes, and a
// refusal, which sends the answer to protojson, for every one with a field
// or value it does not write.
func TestAppendJSONResponseMatchesProtojson(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 1))
	written := 0
	for i := range 5000 {
		resp, plain := randomResponse(r)
		got, ok := appendJSONResponse([]byte("prefix"), resp)
		if ok != plain {
			t.Fatalf("%d: appendJSONResponse ok %v, want %v for %v", i, ok, plain, resp)
		}
		if !ok {
			if string(got) != "prefix" {
				t.Fatalf("%d: refused, but wrote %q", i, got)
			}
			continue
		}
		written++
		want, err := protojson.Marshal(resp)
		if err != nil {
			t.Fatalf("%d: protojson refused what appendJSONResponse wrote: %v", i, err)
		}
		var g, w any
		if err := json.Unmarshal(got[len("prefix"):], &g); err != nil {
			t.Fatalf("%d: %s: %v", i, got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%d:\nappendJSONResponse %s\nprotojson          %s", i, got[len("prefix"):], want)
		}
		back := &rlsv3.RateLimitResponse{}
		if err := protojson.Unmarshal(got[len("prefix"):], back); err != nil || !proto.Equal(back, resp) {
			t.Fatalf("%d: read back %v, %v; want %v", i, back, err, resp)
		}
	}
	if written < 2500 {
		t.Fatalf("only %d of 5000 responses written by hand", written)
	}
}

// jsonRequestSeeds are bodies for FuzzParseJSONRequest: the common form and
// near misses that protojson reads differently or refuses.
var jsonRequestSeeds = []string{
	`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"1"}]}]}`,
	" {\n\t\"domain\" : \"d\" ,\r\"hitsAddend\":5, \"descriptors\":[ {\"entries\":[{\"key\":\"a\",\"value\":\"b\"},{\"value\":\"v\"}]},{}]} ",
	`{"domain":"d","hits_addend":4294967295}`,
	`{}`,
	`{"domain":"d","hits_addend":4294967296}`,
	`{"domain":"d","hitsAddend":"5"}`,
	`{"domain":"d","hitsAddend":5.0}`,
	`{"domain":"d","hitsAddend":05}`,
	`{"domain":"d","hitsAddend":1e2}`,
	`{"domain":"d","hitsAddend":-1}`,
	`{"domain":"d","hitsAddend":1,"hits_addend":2}`,
	`{"domain":"d","domain":"e"}`,
	`{"domain":"\u0064"}`,
	`{"domain":null}`,
	`{"domain":"d","descriptors":null}`,
	`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v","extra":1}]}]}`,
	`{"domain":"d","descriptors":[{"entries":[],"hitsAddend":"3"}]}`,
	`{"domain":"d","descriptors":[{"limit":{"requestsPerUnit":3,"unit":"SECOND"}}]}`,
	`{"domain":"d","unknown":true}`,
	`{"domain":"d"} x`,
	`{"domain":"d",}`,
	`{"domain":"a` + "\xff" + `"}`,
	`{"domain":"a` + "\x01" + `"}`,
	`[]`,
	``,
}

// FuzzParseJSONRequest holds the hand-written reader to protojson: every
// body it reads, protojson reads too, into the same request.
func FuzzParseJSONRequest(f *testing.F) {
	for _, s := range jsonRequestSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		got, ok := parseJSONRequest([]byte(body))
		if !ok {
			return
		}
		want := &rlsv3.RateLimitRequest{}
		if err := protojson.Unmarshal([]byte(body), want); err != nil {
			t.Fatalf("%q: read by hand as %v, protojson refuses it: %v", body, got, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("%q: read by hand as %v, protojson reads %v", body, got, want)
		}
	})
}

// TestParseJSONRequestReadsTheCommonForm checks that the common form is read
// by hand (else every request would go to protojson, and the fuzz target
// would hold nothing) and that what it declines goes to protojson.
func TestParseJSONRequestReadsTheCommonForm(t *testing.T) {
	for _, body := range jsonRequestSeeds[:4] {
		if _, ok := parseJSONRequest([]byte(body)); !ok {
			t.Errorf("%q: not read by hand", body)
		}
	}
	for _, body := range jsonRequestSeeds[4:] {
		if _, ok := parseJSONRequest([]byte(body)); ok {
			t.Errorf("%q: read by hand, want it left to protojson", body)
		}
	}
	req, _ := parseJSONRequest([]byte(jsonRequestSeeds[1]))
	want := &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 5, Descriptors: []*rlcommonv3.RateLimitDescriptor{
		{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "a", Value: "b"}, {Value: "v"}}}, {}}}
	if !proto.Equal(req, want) {
		t.Errorf("read %v, want %v", req, want)
	}
}
