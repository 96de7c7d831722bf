package fixedwindow

import (
	"fmt"
	"sync/atomic"
	"time"
	_ "time/tzdata" // zones without a system database: minimal containers, Wasm
)

// The calendar periods a rule may count in (config key calendar).
const (
	CalendarHour  = "hour"
	CalendarDay   = "day"
	CalendarWeek  = "week"  // ISO week: Monday 00:00 to Monday 00:00
	CalendarMonth = "month" // the 1st 00:00 to the next 1st 00:00
)

// A calendar period begins at the first instant at which the zone's clock
// shows its start (the hour, midnight, Monday midnight, the 1st at
// midnight) or a later time, and ends where the next period begins.
// Periods therefore follow the zone's clock across daylight-saving
// changes (a day of 23 or 25 hours), and each is well defined where a
// start does not exist on the clock (the clock jumps over it: the period
// begins at the jump) or exists twice (the clock goes back over it: the
// period begins at the first). A period whose whole span the clock jumps
// over (the hour skipped in spring) is empty: no decision falls in it.
//
// This is deliberately not time.Date's normalisation, which the time
// package leaves unspecified in gaps and overlaps and which, in practice,
// puts America/Santiago's 6 September 2026 at 23:00 on the 5th.
//
// Times below are Unix seconds; a "wall" time is the zone's clock reading
// expressed as the Unix seconds of the same reading in UTC. Boundaries are
// whole seconds (zone offsets and transitions are).

// calendar is a period kind in a zone.
type calendar struct {
	kind string
	loc  *time.Location
}

// maxOffset bounds every zone offset the database holds (about ±16h), with
// room to spare.
const maxOffset = 48 * 3600

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// wall is the zone's clock reading at instant sec.
func (c calendar) wall(sec int64) int64 {
	_, off := time.Unix(sec, 0).In(c.loc).Zone()
	return sec + int64(off)
}

// truncate returns the start of the period whose clock span holds wall.
func (c calendar) truncate(wall int64) int64 {
	switch c.kind {
	case CalendarHour:
		return floorDiv(wall, 3600) * 3600
	case CalendarDay:
		return floorDiv(wall, 86400) * 86400
	case CalendarWeek:
		day := floorDiv(wall, 86400)
		since := (day + 3) % 7 // days since Monday: 1970-01-01 was a Thursday
		if since < 0 {
			since += 7
		}
		return (day - since) * 86400
	default: // CalendarMonth
		t := time.Unix(wall, 0).UTC()
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC).Unix()
	}
}

// next returns the clock reading at which the period starting at wall
// reading label ends.
func (c calendar) next(label int64) int64 {
	switch c.kind {
	case CalendarHour:
		return label + 3600
	case CalendarDay:
		return label + 86400
	case CalendarWeek:
		return label + 7*86400
	default:
		t := time.Unix(label, 0).UTC()
		return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC).Unix()
	}
}

// first returns the first instant at which the zone's clock reads wall or
// later.
func (c calendar) first(wall int64) int64 {
	// Before wall - maxOffset no clock reads wall or later. Walk the zone's
	// periods (constant offset each) from there: within one, the clock
	// reads wall or later from wall - offset on.
	t := wall - maxOffset
	for {
		z := time.Unix(t, 0).In(c.loc)
		_, off := z.Zone()
		_, end := z.ZoneBounds()
		at := max(t, wall-int64(off))
		if end.IsZero() {
			return at
		}
		e := end.Unix()
		if e <= t {
			// golang/go#81583: past a zone's last listed transition, on
			// the last day of a leap year, ZoneBounds can end the segment
			// before t, which would loop for ever. No zone's rule changes
			// its offset on the last day of a year, so the offset holds
			// until the next year begins: end the segment there and ask
			// again (TestPeriodsAtTheEndOfLeapYears).
			e = time.Date(z.UTC().Year()+1, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
		}
		if at < e {
			return at
		}
		t = e
	}
}

// following returns the first non-empty period start after the instant b,
// which is where the period of clock reading label begins: its clock
// reading and instant.
func (c calendar) following(label, b int64) (int64, int64) {
	for {
		label = c.next(label)
		if nb := c.first(label); nb > b {
			return label, nb
		}
	}
}

// periods are consecutive calendar boundaries: the start of a period, its
// end and the end of the period after it. Values are immutable once made.
type periods struct {
	us   [3]int64 // the boundaries, in microseconds
	last int64    // the clock reading of us[2]
}

// periodsAt returns the period that holds nowUS and the one after it.
func (c calendar) periodsAt(nowUS int64) *periods {
	sec := floorDiv(nowUS, 1e6)
	label := c.truncate(c.wall(sec))
	start := c.first(label) // ≤ sec: the clock read label or later by sec
	for {
		nl, end := c.following(label, start)
		if end > sec {
			ll, after := c.following(nl, end)
			return &periods{us: [3]int64{start * 1e6, end * 1e6, after * 1e6}, last: ll}
		}
		label, start = nl, end
	}
}

// roll returns the periods that begin where p's first one ends.
func (c calendar) roll(p *periods) *periods {
	ll, after := c.following(p.last, p.us[2]/1e6)
	return &periods{us: [3]int64{p.us[1], p.us[2], after * 1e6}, last: ll}
}

// periodCache holds the last periods a decision found, shared by the
// concurrent decisions of one config. It only chooses which boundaries a
// call offers the script, which checks them against Redis time: a stale or
// lost value costs a second script call, never a different decision.
type periodCache = atomic.Pointer[periods]

// loadZone loads an IANA zone name for tz.
func loadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("want an IANA zone name such as \"Asia/Shanghai\", got %q", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	return loc, nil
}
