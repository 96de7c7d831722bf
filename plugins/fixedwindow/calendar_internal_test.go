package fixedwindow

import (
	"archive/zip"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// embeddedZones loads names from Go's own zone database (the copy that
// time/tzdata embeds), which may differ from the system's.
func embeddedZones(t *testing.T, names []string) []*time.Location {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	zr, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(out)), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var locs []*time.Location
	for _, name := range names {
		f, err := zr.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		loc, err := time.LoadLocationFromTZData(name, data)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, loc)
	}
	return locs
}

// TestPeriodsAtTheEndOfLeapYears: past a zone's last listed transition,
// time.Location.ZoneBounds ends a segment too early on the last day of a
// leap year (golang/go#81583); the periods must still be found, and be
// right, in every calendar, with the system's zones and Go's own.
func TestPeriodsAtTheEndOfLeapYears(t *testing.T) {
	names := []string{"America/New_York", "Europe/Berlin", "Asia/Shanghai", "America/Santiago", "Australia/Lord_Howe", "UTC"}
	var locs []*time.Location
	for _, n := range names {
		loc, err := time.LoadLocation(n)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, loc)
	}
	locs = append(locs, embeddedZones(t, names)...)
	var instants []time.Time
	for _, year := range []int{2028, 2040, 2100, 2204} {
		for _, d := range []time.Duration{-36 * time.Hour, -12 * time.Hour, -time.Second, 0, time.Hour, 30 * time.Hour} {
			instants = append(instants, time.Date(year+1, 1, 1, 0, 0, 0, 0, time.UTC).Add(d))
		}
	}
	for _, loc := range locs {
		for _, kind := range []string{CalendarHour, CalendarDay, CalendarWeek, CalendarMonth} {
			c := calendar{kind: kind, loc: loc}
			for _, at := range instants {
				done := make(chan *periods, 1)
				go func() { done <- c.periodsAt(at.UnixMicro()) }()
				var p *periods
				select {
				case p = <-done:
				case <-time.After(5 * time.Second):
					t.Fatalf("%s %s at %s: no answer in 5 s", loc, kind, at)
				}
				start, end, after := p.us[0]/1e6, p.us[1]/1e6, p.us[2]/1e6
				now := at.Unix()
				// The period holds now; the zone's clock shows its label at
				// its start and a new label at its end.
				if !(start <= now && now < end && end < after) ||
					c.truncate(c.wall(start)) != c.truncate(c.wall(end-1)) ||
					c.truncate(c.wall(end)) == c.truncate(c.wall(end-1)) {
					t.Errorf("%s %s at %s: periods %s %s %s", loc, kind, at,
						time.Unix(start, 0).In(loc), time.Unix(end, 0).In(loc), time.Unix(after, 0).In(loc))
				}
			}
		}
	}
}

// Two configs of the same values print alike with %#v, by which the local
// limiters are keyed: the period cache's address is left out.
func TestConfigsOfTheSameValuesPrintAlike(t *testing.T) {
	raw := map[string]any{"limit": 5, "calendar": "day", "tz": "Europe/Berlin"}
	a, err := Plugin{}.Configure(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Plugin{}.Configure(raw)
	if fa, fb := fmt.Sprintf("%#v", a), fmt.Sprintf("%#v", b); fa != fb || fa != "fixedwindow.Config{Limit:5 Calendar:day Location:Europe/Berlin}" {
		t.Errorf("%s and %s", fa, fb)
	}
}
