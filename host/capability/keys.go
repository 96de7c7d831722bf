package capability

// The keys ruled writes for a plugin: "<prefix>:<plugin>:<rule>:{<subject>}:<key>",
// the subject escaped (EscapeSubject) inside the hash tag, so that a Redis
// Cluster keeps every key of one subject on one node.

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// KeyPrefix returns the prefix of every key of one rule and subject:
// "<prefix>:<plugin>:<rule>:{<subject>}:". Rule names are validated at load.
func (p *Plugin) KeyPrefix(rule, subject string) string {
	subject = EscapeSubject(subject)
	var b strings.Builder
	b.Grow(p.prefixLen(rule, subject))
	p.writePrefix(&b, rule, subject)
	return b.String()
}

// prefixLen is the length of the key prefix of rule and an escaped subject.
func (p *Plugin) prefixLen(rule, subject string) int {
	return len(p.ns) + len(rule) + len(":{") + len(subject) + len("}:")
}

// writePrefix writes the key prefix of rule and an escaped subject; it is
// the one place that knows the key layout.
func (p *Plugin) writePrefix(b *strings.Builder, rule, subject string) {
	b.WriteString(p.ns)
	b.WriteString(rule)
	b.WriteString(":{")
	b.WriteString(subject)
	b.WriteString("}:")
}

// fullKeys returns the keys of one call under their rule and subject's
// prefix (KeyPrefix), all in one allocation.
func (p *Plugin) fullKeys(rule, subject string, keys []string, out []string) []string {
	plen := p.prefixLen(rule, subject)
	n := 0
	for _, k := range keys {
		n += plen + len(k)
	}
	var b strings.Builder
	b.Grow(n)
	for _, k := range keys {
		p.writePrefix(&b, rule, subject)
		b.WriteString(k)
	}
	all := b.String()
	for _, k := range keys {
		out = append(out, all[:plen+len(k)])
		all = all[plen+len(k):]
	}
	return out
}

// validKey reports whether k may name a relative key (or a script):
// 1 to 64 letters, digits, '_', '.' or '-'. It runs on every call, so it is
// a loop rather than a regular expression.
func validKey(k string) bool {
	if len(k) == 0 || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// maxSubjectKeyLen is the longest escaped subject kept readable in keys;
// longer subjects are replaced by a hash.
const maxSubjectKeyLen = 128

// EscapeSubject makes an arbitrary subject safe inside a key's hash tag:
// bytes outside a conservative set are percent-encoded, and a subject whose
// escaped form is longer than 128 bytes becomes "#" and 32 hex digits of its
// SHA-256; the empty subject becomes "%". Distinct subjects always map to distinct strings, except for the
// negligible chance of a hash collision among long ones.
func EscapeSubject(s string) string {
	if s == "" {
		// "{}" would make Redis Cluster hash the whole key: "%" is a
		// subject no other subject escapes to.
		return "%"
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			clean = false
			break
		}
	}
	if clean && len(s) <= maxSubjectKeyLen && !strings.HasPrefix(s, "#") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	const hexd = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safeByte(c) && !(i == 0 && c == '#') {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hexd[c>>4])
			b.WriteByte(hexd[c&15])
		}
		if b.Len() > maxSubjectKeyLen {
			sum := sha256.Sum256([]byte(s))
			return "#" + hex.EncodeToString(sum[:16])
		}
	}
	return b.String()
}

func safeByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("._-@/+=,;:!~", c) >= 0
}

// escapedForm reports whether s can be what EscapeSubject returns: safe
// bytes and '%' (percent-encoding), or '#' first (a hash).
func escapedForm(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !safeByte(c) && c != '%' && !(i == 0 && c == '#') {
			return false
		}
	}
	return true
}

// unescapeSubject reverses EscapeSubject: false for a hashed subject, or a
// form EscapeSubject does not give.
func unescapeSubject(esc string) (string, bool) {
	if esc == "%" {
		return "", true
	}
	if strings.HasPrefix(esc, "#") {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(esc))
	for i := 0; i < len(esc); i++ {
		c := esc[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(esc) {
			return "", false
		}
		v, err := strconv.ParseUint(esc[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	s := b.String()
	return s, EscapeSubject(s) == esc
}

// subjectOfKey returns the subject of key, one of the keys under prefix
// ("<prefix>:<plugin>:<rule>:{"), and false when key is not one ruled
// writes.
func subjectOfKey(key, prefix string) (Subject, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return Subject{}, false
	}
	esc, _, ok := strings.Cut(rest, "}:")
	if !ok || !escapedForm(esc) {
		return Subject{}, false
	}
	if name, ok := unescapeSubject(esc); ok {
		return Subject{Name: name, Key: esc}, true
	}
	return Subject{Name: esc, Key: esc, Hashed: true}, true
}
