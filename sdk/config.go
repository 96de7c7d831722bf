package sdk

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ConfigReader reads typed values out of a rule's raw config and collects
// every problem, so that Configure can report them all at once:
//
//	r := sdk.NewConfigReader(raw)
//	limit := r.RequireInt("limit")
//	window := r.RequireDuration("window")
//	r.Check(limit > 0, "limit", "must be at least 1")
//	if err := r.Done(); err != nil { return nil, err }
//
// Done also reports keys that were present but never read, which catches
// typos in rule files.
type ConfigReader struct {
	raw  map[string]any
	read map[string]bool
	errs []error
}

// NewConfigReader returns a reader over raw.
func NewConfigReader(raw map[string]any) *ConfigReader {
	return &ConfigReader{raw: raw, read: make(map[string]bool, len(raw))}
}

// Has reports whether key is present.
func (r *ConfigReader) Has(key string) bool {
	_, ok := r.raw[key]
	return ok
}

func (r *ConfigReader) get(key string, required bool) (any, bool) {
	r.read[key] = true
	v, ok := r.raw[key]
	if !ok && required {
		r.errs = append(r.errs, fmt.Errorf("%s: required", key))
	}
	return v, ok
}

// Fail records a problem with key.
func (r *ConfigReader) Fail(key, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

// Check records a problem with key when ok is false.
func (r *ConfigReader) Check(ok bool, key, format string, args ...any) {
	if !ok {
		r.Fail(key, format, args...)
	}
}

// Int returns key as an integer, or def when absent.
func (r *ConfigReader) Int(key string, def int64) int64 {
	if v, ok := r.get(key, false); ok {
		return r.toInt(key, v)
	}
	return def
}

// RequireInt returns key as an integer and records an error when absent.
func (r *ConfigReader) RequireInt(key string) int64 {
	if v, ok := r.get(key, true); ok {
		return r.toInt(key, v)
	}
	return 0
}

// Duration returns key as a duration ("250ms", "10s", "1m", "1h"), or def
// when absent.
func (r *ConfigReader) Duration(key string, def time.Duration) time.Duration {
	if v, ok := r.get(key, false); ok {
		return r.toDuration(key, v)
	}
	return def
}

// RequireDuration returns key as a duration and records an error when absent.
func (r *ConfigReader) RequireDuration(key string) time.Duration {
	if v, ok := r.get(key, true); ok {
		return r.toDuration(key, v)
	}
	return 0
}

// String returns key as a string, or def when absent.
func (r *ConfigReader) String(key, def string) string {
	v, ok := r.get(key, false)
	if !ok {
		return def
	}
	s, isStr := v.(string)
	if !isStr {
		r.Fail(key, "want a string, got %v", v)
	}
	return s
}

// Bool returns key as a boolean, or def when absent.
func (r *ConfigReader) Bool(key string, def bool) bool {
	v, ok := r.get(key, false)
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		r.Fail(key, "want true or false, got %v", v)
	}
	return b
}

// List returns key as a list of maps (for nested config such as extra
// rates), or nil when absent.
func (r *ConfigReader) List(key string) []map[string]any {
	v, ok := r.get(key, false)
	if !ok {
		return nil
	}
	items, isList := v.([]any)
	if !isList {
		r.Fail(key, "want a list, got %v", v)
		return nil
	}
	out := make([]map[string]any, 0, len(items))
	for i, it := range items {
		m, isMap := it.(map[string]any)
		if !isMap {
			r.Fail(fmt.Sprintf("%s[%d]", key, i), "want a mapping, got %v", it)
			continue
		}
		out = append(out, m)
	}
	return out
}

// Done returns every problem found so far, plus one for each key never
// read. It may be called again after further checks.
func (r *ConfigReader) Done() error {
	var unknown []string
	for k := range r.raw {
		if !r.read[k] {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		r.read[k] = true
		r.errs = append(r.errs, fmt.Errorf("%s: unknown field", k))
	}
	return errors.Join(r.errs...)
}

func (r *ConfigReader) toInt(key string, v any) int64 {
	switch t := v.(type) {
	case int:
		return int64(t)
	case int64:
		return t
	case int32:
		return int64(t)
	case uint64:
		if t <= math.MaxInt64 {
			return int64(t)
		}
	case float64:
		if t == math.Trunc(t) && math.Abs(t) < 1<<53 {
			return int64(t)
		}
	case string:
		if n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64); err == nil {
			return n
		}
	}
	r.Fail(key, "want a whole number, got %v", v)
	return 0
}

func (r *ConfigReader) toDuration(key string, v any) time.Duration {
	switch t := v.(type) {
	case time.Duration:
		return t
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(t))
		if err == nil {
			return d
		}
	case int, int64, float64:
		if r.toInt(key, t) == 0 {
			return 0
		}
	}
	r.Fail(key, `want a duration such as "500ms", "10s" or "1m", got %v`, v)
	return 0
}
