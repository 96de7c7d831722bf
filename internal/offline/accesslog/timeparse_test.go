package accesslog

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// sameTime fails unless got and want are the same instant at the same
// offset.
func sameTime(t *testing.T, in string, got, want time.Time) {
	t.Helper()
	_, goff := got.Zone()
	_, woff := want.Zone()
	if !got.Equal(want) || goff != woff {
		t.Fatalf("%q: got %v (offset %d), want %v (offset %d)", in, got, goff, want, woff)
	}
}

func TestCLFTimeMatchesTimeParse(t *testing.T) {
	const layout = "02/Jan/2006:15:04:05 -0700"
	rng := rand.New(rand.NewPCG(1, 2))
	var z zones
	fixed := []string{
		"10/Oct/2000:13:55:36 -0700",
		"01/Jan/1970:00:00:00 +0000",
		"31/Dec/1969:23:59:59 +0000",
		"29/Feb/2024:12:00:00 +0530",
		"29/Feb/2000:00:00:00 -1200",
		"28/Feb/1900:23:59:59 +1400",
		"01/Mar/2100:00:00:01 +0845",
		"31/Dec/9999:23:59:59 -0001",
		"01/Jan/0001:00:00:00 +0000",
		"15/jan/2021:10:00:00 +0100", // time.Parse accepts any case
		"15/DEC/2021:10:00:00 -0330",
	}
	for _, s := range fixed {
		want, err := time.Parse(layout, s)
		if err != nil {
			t.Fatalf("time.Parse(%q): %v", s, err)
		}
		got, err := parseCLFTime(s, &z)
		if err != nil {
			t.Fatalf("parseCLFTime(%q): %v", s, err)
		}
		sameTime(t, s, got, want)
	}
	for range 200_000 {
		off := (rng.IntN(28*60) - 14*60) * 60 // -14:00 .. +13:59
		if rng.IntN(4) == 0 {
			off = (rng.IntN(48) - 24) * 1800 // the common half hours
		}
		loc := time.FixedZone("", off)
		sec := rng.Int64N(400*365*86400) - 200*365*86400
		if rng.IntN(2) == 0 {
			sec = rng.Int64N(int64(253402300799)+62135596800) - 62135596800 // years 1..9999
		}
		w := time.Unix(sec, 0).In(loc)
		if w.Year() < 1 || w.Year() > 9999 {
			continue
		}
		s := w.Format(layout)
		got, err := parseCLFTime(s, &z)
		if err != nil {
			t.Fatalf("parseCLFTime(%q): %v", s, err)
		}
		want, err := time.Parse(layout, s)
		if err != nil {
			t.Fatalf("time.Parse(%q): %v", s, err)
		}
		sameTime(t, s, got, want)
	}
}

func TestCLFTimeRejects(t *testing.T) {
	const layout = "02/Jan/2006:15:04:05 -0700"
	var z zones
	for _, s := range []string{
		"",
		"10/Oct/2000:13:55:36",        // no offset
		"10/Oct/2000:13:55:36 0700",   // no sign
		"10/Oct/2000:13:55:36 -07:00", // colon
		"10/Okt/2000:13:55:36 -0700",  // month
		"1/Oct/2000:13:55:36 -0700",   // one-digit day
		"32/Oct/2000:13:55:36 -0700",
		"00/Oct/2000:13:55:36 -0700",
		"29/Feb/2023:13:55:36 -0700", // not a leap year
		"29/Feb/1900:13:55:36 -0700",
		"31/Apr/2000:13:55:36 -0700",
		"10/Oct/2000:24:55:36 -0700",
		"10/Oct/2000:13:60:36 -0700",
		"10/Oct/2000:13:55:60 -0700",
		"10/Oct/2000:13:55:3x -0700",
		"10/Oct/2000 13:55:36 -0700",
		"10-Oct-2000:13:55:36 -0700",
		"10/Oct/2000:13:55:36 -07a0",
	} {
		if _, err := parseCLFTime(s, &z); err == nil {
			t.Errorf("parseCLFTime(%q) succeeded", s)
		}
		if _, err := time.Parse(layout, s); err == nil {
			t.Errorf("time.Parse(%q) succeeded: the case is not a bad time", s)
		}
	}
}

func TestRFC3339MatchesTimeParse(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var z zones
	for _, s := range []string{
		"2024-05-01T12:00:00Z",
		"2024-05-01T12:00:00.5Z",
		"2024-05-01T12:00:00.123456789+02:00",
		"2024-02-29T23:59:59.000001-09:30",
		"1969-12-31T23:59:59.999999999Z",
	} {
		want, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseRFC3339(s, &z)
		if err != nil {
			t.Fatalf("parseRFC3339(%q): %v", s, err)
		}
		sameTime(t, s, got, want)
	}
	for range 100_000 {
		off := (rng.IntN(28*60) - 14*60) * 60
		w := time.Unix(rng.Int64N(200*365*86400)-100*365*86400, rng.Int64N(1e9)).In(time.FixedZone("", off))
		if off == 0 && rng.IntN(2) == 0 {
			w = w.UTC()
		}
		layout, parse := time.RFC3339Nano, time.RFC3339Nano
		switch rng.IntN(4) {
		case 0:
			layout = time.RFC3339
		case 1:
			layout, parse = rfc3339NoColon, rfc3339NoColon
		}
		s := w.Format(layout)
		want, err := time.Parse(parse, s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseRFC3339(s, &z)
		if err != nil {
			t.Fatalf("parseRFC3339(%q): %v", s, err)
		}
		sameTime(t, s, got, want)
	}
	for _, s := range []string{
		"2024-05-01T12:00:00",       // no zone
		"2024-05-01T12:00:00+020",   // short offset
		"2024-05-01T12:00:00+02:0",  //
		"2024-05-01T12:00:00+2400",  // offset hour
		"2024-05-01T12:00:00 0200",  // no sign
		"2024-05-01T12:00:00+02000", // long offset
		"2024-05-01T12:00:00.Z",     // empty fraction
		"2024-13-01T12:00:00Z",      // month
		"2024-02-30T12:00:00Z",      // day
		"2024-05-01T12:00:00+24:00", // offset hour
		"2024-05-01T12:00:00.1234567890Z",
	} {
		if _, err := parseRFC3339(s, &z); err == nil {
			t.Errorf("parseRFC3339(%q) succeeded", s)
		}
	}
}

// rfc3339NoColon is RFC 3339 with an offset of ±hhmm (Apache's %z, Java's
// Z), which parseRFC3339 accepts too.
const rfc3339NoColon = "2006-01-02T15:04:05.999999999-0700"

func TestRFC3339OffsetWithoutColon(t *testing.T) {
	var z zones
	for _, s := range []string{
		"2024-05-01T12:00:00+0000",
		"2024-05-01T12:00:00-0930",
		"2024-05-01T12:00:00.123+0530",
		"2024-05-01 12:00:00,5+0100",
	} {
		want, err := time.Parse(rfc3339NoColon, strings.Replace(strings.Replace(s, ",", ".", 1), " ", "T", 1))
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseRFC3339(s, &z)
		if err != nil {
			t.Fatalf("parseRFC3339(%q): %v", s, err)
		}
		sameTime(t, s, got, want)
	}
	// Through a JSON log.
	e, err := readJSON(t, Options{}, `{"time":"2024-05-01T12:00:00-0700","status":200}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, off := e.Time.Zone(); off != -7*3600 || !e.Time.Equal(time.Date(2024, 5, 1, 19, 0, 0, 0, time.UTC)) {
		t.Errorf("time %v", e.Time)
	}
}

func TestUnixTime(t *testing.T) {
	want := time.Date(2024, 5, 1, 12, 0, 0, 123_000_000, time.UTC)
	for _, s := range []string{
		"1714564800.123",      // seconds (nginx $msec)
		"1714564800123",       // milliseconds
		"1714564800123.0",     // milliseconds with a fraction
		"1714564800123000",    // microseconds
		"1714564800123000000", // nanoseconds
		"1.714564800123e9",    // exponent
	} {
		got, err := parseUnixTime(s)
		if err != nil {
			t.Fatalf("parseUnixTime(%q): %v", s, err)
		}
		if d := got.Sub(want); d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("parseUnixTime(%q) = %v, want %v", s, got, want)
		}
		if got.Location() != time.UTC {
			t.Errorf("parseUnixTime(%q) is in %v, want UTC", s, got.Location())
		}
	}
	// Exact, not through floats.
	got, err := parseUnixTime("1714564800.000000001")
	if err != nil || got.UnixNano() != 1714564800_000000001 {
		t.Errorf("nanosecond fraction: got %v, %v", got.UnixNano(), err)
	}
	got, err = parseUnixTime("1714564800123.456")
	if err != nil || got.UnixNano() != 1714564800_123456000 {
		t.Errorf("millisecond fraction: got %v, %v", got.UnixNano(), err)
	}
	for _, s := range []string{"", "-", "abc", "12.", ".5", "1714564800x", "1e999", "NaN"} {
		if _, err := parseUnixTime(s); err == nil {
			t.Errorf("parseUnixTime(%q) succeeded", s)
		}
	}
}

func TestZonesCacheOffsets(t *testing.T) {
	var z zones
	a, b := z.get(3600), z.get(-7200)
	if z.get(3600) != a || z.get(-7200) != b {
		t.Fatal("the same offset gave two locations")
	}
	if z.get(0) != time.UTC {
		t.Fatal("offset 0 is not UTC")
	}
	if _, off := time.Unix(0, 0).In(b).Zone(); off != -7200 {
		t.Fatalf("offset %d, want -7200", off)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := parseCLFTime("10/Oct/2000:13:55:36 -0700", &z); err != nil {
			panic(err)
		}
	}); n != 0 {
		t.Errorf("parseCLFTime allocates %v times per call", n)
	}
}

func BenchmarkCLFTime(b *testing.B) {
	var z zones
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseCLFTime("10/Oct/2000:13:55:36 -0700", &z); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("time.Parse", func(b *testing.B) {
		for b.Loop() {
			if _, err := time.Parse("02/Jan/2006:15:04:05 -0700", "10/Oct/2000:13:55:36 -0700"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
