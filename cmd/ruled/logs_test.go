package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJSONLogLinesAreObjectsWithUniqueKeys serves, in JSON log mode at
// debug level, rules on the managed redis-server, a Wasm plugin and a
// process plugin; reloads them once with errors and once fixed; and stops.
// Every line written is a JSON object that has no key twice, at any depth
// (encoding/json would keep the last of two silently).
func TestJSONLogLinesAreObjectsWithUniqueKeys(t *testing.T) {
	dir := t.TempDir()
	buildPlugin(t, "../../examples/plugins/gcra/wasm", filepath.Join(dir, "gcra.wasm"))
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "concurrency"), "../../examples/plugins/concurrency").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const good = `plugins:
  gcra: {wasm: ./gcra.wasm}
  conc: {process: ./concurrency}
rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 10s}
  - name: per-user
    subject: request.user
    plugin: gcra
    config: {rate: 1, per: 10s, burst: 2}
  - name: one-at-a-time
    subject: request.user
    plugin: conc
    config: {limit: 1, ttl: 1m}
    deny_cache: false
`
	rules := writeFile(t, dir, "rules.yaml", good)
	s := startServe(t, dir, "--rules", rules, "--log-format", "json", "--log-level", "debug")
	if r := s.check(t, `{"request": {"ip": "203.0.113.7", "user": "u"}, "hits": 1, "dedup_id": "a"}`); r.status != 200 || len(r.Results) != 3 {
		t.Fatalf("check: %+v\n%s", r, s.logs.String())
	}
	// A reload with two errors, then one that succeeds (the watcher).
	replaceFile(t, rules, strings.Replace(strings.Replace(good, "request.ip", "request.ipp", 1), "10s}", "10x}", 1))
	waitLog(t, s, `"msg":"rules reload failed; the previous rules keep serving"`)
	replaceFile(t, rules, good+"    shadow: true\n")
	waitLog(t, s, `"msg":"rules reloaded"`)
	if code := s.stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}

	logs := s.logs.String()
	lines := strings.Split(strings.TrimSuffix(logs, "\n"), "\n")
	for i, l := range lines {
		if err := uniqueKeys(l); err != nil {
			t.Errorf("line %d: %v:\n%s", i+1, err, l)
		}
	}
	// The run wrote what the test means to cover: the managed server's
	// relayed output, both plugins, each reload error on a line of its own.
	for _, want := range []string{`"source":"redis-server"`, `"msg":"plugin started","plugin":"gcra"`,
		`"msg":"plugin started","plugin":"conc"`, `"component":"go-plugin`, `"msg":"rules reload error"`, `"msg":"shutting down"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs, `"msg":"rules reload error"`); n != 2 {
		t.Errorf("%d reload error lines, want 2", n)
	}
}

// waitLog waits until the server's log holds want.
func waitLog(t *testing.T, s *server, want string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(s.logs.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %s after 15s:\n%s", want, s.logs.String())
		}
	}
}

// uniqueKeys returns an error unless line is exactly one JSON object in
// which no object, at any depth, has a key twice.
func uniqueKeys(line string) error {
	dec := json.NewDecoder(strings.NewReader(line))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("not a JSON object: starts with %v", tok)
	}
	if err := objectKeys(dec, ""); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("more after the object (%v)", err)
	}
	return nil
}

// objectKeys reads the rest of an object whose '{' dec has read, failing
// on a repeated key in it or in any object it holds.
func objectKeys(dec *json.Decoder, path string) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		k := tok.(string)
		if seen[k] {
			return fmt.Errorf("key %q twice", path+k)
		}
		seen[k] = true
		if err := value(dec, path+k+"."); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// value reads one JSON value, checking the objects in it.
func value(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return objectKeys(dec, path)
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := value(dec, fmt.Sprintf("%s%d.", path, i)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

// TestUniqueKeys checks the checker: it must catch a repeated key at the
// top and in nested objects, and reject what is not one JSON object.
func TestUniqueKeys(t *testing.T) {
	for line, ok := range map[string]bool{
		`{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}`: true,
		`{"a":1,"a":2}`:                     false,
		`{"a":{"b":1,"b":2}}`:               false,
		`{"a":[{"b":1,"c":{"d":1,"d":2}}]}`: false,
		`[1]`:                               false,
		`{"a":1} {"b":2}`:                   false,
		`level=INFO msg=x`:                  false,
	} {
		if err := uniqueKeys(line); (err == nil) != ok {
			t.Errorf("uniqueKeys(%s) = %v", line, err)
		}
	}
}
