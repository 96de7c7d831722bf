package httpapi

import (
	"strconv"
	"sync"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/jsonw"
)

// The check answer is written by hand rather than through encoding/json:
// it is the hot path's one JSON document, and reflection cost more than the
// rest of the HTTP layer. TestAppendResultMatchesEncodingJSON holds it to
// the bytes encoding/json would write for checkAnswer.

var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendResult appends the JSON check answer for res and a newline.
func appendResult(b []byte, res *host.Result) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, res.Allowed)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, ceilMS(res.RetryAfter), 10)
	b = append(b, `,"results":[`...)
	for i := range res.Results {
		rr := &res.Results[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"rule":`...)
		b = jsonw.AppendString(b, rr.Rule)
		b = append(b, `,"subject":`...)
		b = jsonw.AppendString(b, rr.Subject)
		b = append(b, `,"plugin":`...)
		b = jsonw.AppendString(b, rr.Plugin)
		b = append(b, `,"allowed":`...)
		b = strconv.AppendBool(b, rr.Allowed)
		b = append(b, `,"granted":`...)
		b = strconv.AppendInt(b, rr.Granted, 10)
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, rr.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, rr.Remaining, 10)
		b = append(b, `,"reset_ms":`...)
		b = strconv.AppendInt(b, ceilMS(rr.Reset), 10)
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, ceilMS(rr.RetryAfter), 10)
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, ceilMS(rr.Delay), 10)
		b = append(b, `,"shadow":`...)
		b = strconv.AppendBool(b, rr.Shadow)
		if rr.Exempt {
			b = append(b, `,"exempt":true`...)
		}
		if rr.Held() {
			b = append(b, `,"held":true`...)
		}
		b = append(b, `,"degraded":`...)
		b = jsonw.AppendString(b, string(rr.Degraded))
		if rr.Err != nil {
			b = append(b, `,"error":`...)
			b = jsonw.AppendString(b, rr.Err.Error())
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}
