package accesslog

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/rules"
)

const (
	benchCombined = `203.0.113.7 - - [10/Oct/2023:13:55:36 +0200] "GET /api/v1/items/12345?page=2&sort=asc HTTP/1.1" 200 1534 "https://www.example.com/start/page" "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/118.0.0.0 Safari/537.36"`
	benchJSON     = `{"time":"2023-10-10T13:55:36+02:00","remote_addr":"203.0.113.7","remote_user":"","request":"GET /api/v1/items/12345?page=2&sort=asc HTTP/1.1","request_method":"GET","request_uri":"/api/v1/items/12345?page=2&sort=asc","host":"api.example.com","status":"200","body_bytes_sent":"1534","request_time":"0.012","http_referer":"https://www.example.com/start/page","http_user_agent":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/118.0.0.0 Safari/537.36","tenant":"acme"}`
)

// cycle repeats its line forever.
type cycle struct {
	data []byte
	off  int
}

func (c *cycle) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], c.data[c.off:])
		n += k
		c.off = (c.off + k) % len(c.data)
	}
	return n, nil
}

func benchRead(b *testing.B, line string, opt Options) {
	r, err := NewReader(&cycle{data: []byte(line + "\n")}, opt)
	if err != nil {
		b.Fatal(err)
	}
	var e Entry
	b.SetBytes(int64(len(line) + 1))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Read(&e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadCombined(b *testing.B) { benchRead(b, benchCombined, Options{Format: Combined}) }

func BenchmarkReadJSON(b *testing.B) { benchRead(b, benchJSON, Options{Format: JSON}) }

// BenchmarkReadJSONStdlib is what encoding/json costs for the same line,
// into a map or a fixed struct (no configurable keys), for comparison.
func BenchmarkReadJSONStdlib(b *testing.B) {
	line := []byte(benchJSON)
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("struct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v struct {
				Time      string `json:"time"`
				IP        string `json:"remote_addr"`
				User      string `json:"remote_user"`
				Method    string `json:"request_method"`
				URI       string `json:"request_uri"`
				Host      string `json:"host"`
				Status    string `json:"status"`
				Bytes     string `json:"body_bytes_sent"`
				Referer   string `json:"http_referer"`
				UserAgent string `json:"http_user_agent"`
			}
			if err := json.Unmarshal(line, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchMap(b *testing.B, specs []string, f Format, line string) {
	m, err := NewMapper(specs)
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewReader(&cycle{data: []byte(line + "\n")}, Options{Format: f})
	if err != nil {
		b.Fatal(err)
	}
	var e Entry
	if err := r.Read(&e); err != nil {
		b.Fatal(err)
	}
	var in rules.Input
	b.ReportAllocs()
	for b.Loop() {
		// A new line each time: the query and fields caches start empty.
		e.query, e.queryDone, e.fields, e.fieldsErr, e.fieldsOK = nil, false, nil, nil, false
		if err := m.Map(&e, &in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMapDefault(b *testing.B) {
	b.Run("combined", func(b *testing.B) { benchMap(b, nil, Combined, benchCombined) })
	b.Run("noquery", func(b *testing.B) {
		benchMap(b, nil, Combined, `203.0.113.7 - - [10/Oct/2023:13:55:36 +0200] "GET /api/v1/items/12345 HTTP/1.1" 200 1534 "-" "curl/8.5.0"`)
	})
}

func BenchmarkMapExpr(b *testing.B) {
	b.Run("combined", func(b *testing.B) {
		benchMap(b, []string{`attrs.class=status >= 500 ? "error" : "ok"`, `headers.x-api-key=query.page`}, Combined, benchCombined)
	})
	b.Run("json-fields", func(b *testing.B) {
		benchMap(b, []string{`attrs.tenant=fields.tenant`}, JSON, benchJSON)
	})
}

// BenchmarkReadMap is the whole per-line cost of replay's input side:
// read and map a combined line with the default mapping.
func BenchmarkReadMap(b *testing.B) {
	r, err := NewReader(&cycle{data: []byte(benchCombined + "\n")}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMapper(nil)
	if err != nil {
		b.Fatal(err)
	}
	var e Entry
	var in rules.Input
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Read(&e); err != nil {
			b.Fatal(err)
		}
		if err := m.Map(&e, &in); err != nil {
			b.Fatal(err)
		}
	}
}

var _ io.Reader = (*cycle)(nil)

// BenchmarkScanStringEscapes reads a combined line whose user agent is
// all escapes, at three sizes: the cost per byte (MB/s) is the same at
// each, where it used to grow with the length (1.2 s for 600 KB).
func BenchmarkScanStringEscapes(b *testing.B) {
	for _, n := range []int{1 << 10, 32 << 10, 1 << 20} {
		for name, esc := range map[string]string{"backslash": `\\`, "x41": `\x41`} {
			b.Run(fmt.Sprintf("combined-%s/%d", name, n), func(b *testing.B) {
				line := `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "` + strings.Repeat(esc, n/len(esc)) + `"`
				benchRead(b, line, Options{Format: Combined, MaxLine: 4 << 20})
			})
		}
		b.Run(fmt.Sprintf("json-u0000/%d", n), func(b *testing.B) {
			line := `{"time":1,"skipped":"` + strings.Repeat(`\u0000`, n/6) + `"}`
			benchRead(b, line, Options{Format: JSON, MaxLine: 4 << 20})
		})
	}
}
