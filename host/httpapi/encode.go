package httpapi

import (
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/ruled-dev/ruled/host"
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
		b = appendString(b, rr.Rule)
		b = append(b, `,"subject":`...)
		b = appendString(b, rr.Subject)
		b = append(b, `,"plugin":`...)
		b = appendString(b, rr.Plugin)
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
		b = append(b, `,"degraded":`...)
		b = appendString(b, string(rr.Degraded))
		if rr.Err != nil {
			b = append(b, `,"error":`...)
			b = appendString(b, rr.Err.Error())
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json does:
// quotes, backslashes, control characters, <, > and &, U+2028 and U+2029,
// and invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
