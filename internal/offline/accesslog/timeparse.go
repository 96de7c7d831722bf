package accesslog

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// zones caches the fixed time zones of the offsets a Reader has seen, so
// that building an Entry's Time allocates nothing once an offset is known.
// Logs almost always carry one offset (two around a DST change): the last
// one is checked first.
type zones struct {
	off int
	loc *time.Location
	m   map[int]*time.Location
}

func (z *zones) get(off int) *time.Location {
	if z.loc != nil && z.off == off {
		return z.loc
	}
	var loc *time.Location
	if off == 0 {
		loc = time.UTC
	} else {
		loc = z.m[off]
		if loc == nil {
			if z.m == nil {
				z.m = make(map[int]*time.Location)
			}
			loc = time.FixedZone("", off)
			z.m[off] = loc
		}
	}
	z.off, z.loc = off, loc
	return loc
}

var (
	errTimeLayout = errors.New("want dd/Mon/yyyy:hh:mm:ss ±hhmm")
	errTimeRange  = errors.New("field out of range")
	errRFC3339    = errors.New("want RFC 3339 (yyyy-mm-ddThh:mm:ss[.frac] and Z, ±hh:mm or ±hhmm)")
	errNumber     = errors.New("not a number")
)

// parseCLFTime parses the time of the common log format,
// "10/Oct/2000:13:55:36 -0700", exactly as time.Parse does with the layout
// "02/Jan/2006:15:04:05 -0700", in about a tenth of its time and without
// allocating (the zone comes from z).
func parseCLFTime(s string, z *zones) (time.Time, error) {
	if len(s) != 26 || s[2] != '/' || s[6] != '/' || s[11] != ':' || s[14] != ':' || s[17] != ':' || s[20] != ' ' {
		return time.Time{}, errTimeLayout
	}
	day, ok1 := num2(s, 0)
	mon := monthOf(s[3:6])
	year, ok2 := num4(s, 7)
	hh, ok3 := num2(s, 12)
	mm, ok4 := num2(s, 15)
	ss, ok5 := num2(s, 18)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || mon == 0 {
		return time.Time{}, errTimeLayout
	}
	off, ok := clfOffset(s[21:])
	if !ok {
		return time.Time{}, errTimeLayout
	}
	return civil(year, mon, day, hh, mm, ss, 0, off, z)
}

// clfOffset parses "+hhmm" or "-hhmm" into seconds east of UTC.
func clfOffset(s string) (int, bool) {
	if len(s) != 5 {
		return 0, false
	}
	return zoneOffset(s, 3)
}

// zoneOffset parses a zone offset into seconds east of UTC: its sign at
// s[0], the hours at s[1:3] and the minutes at s[mi:mi+2].
func zoneOffset(s string, mi int) (int, bool) {
	if s[0] != '+' && s[0] != '-' {
		return 0, false
	}
	h, ok1 := num2(s, 1)
	m, ok2 := num2(s, mi)
	if !ok1 || !ok2 || h > 23 || m > 59 {
		return 0, false
	}
	off := h*3600 + m*60
	if s[0] == '-' {
		off = -off
	}
	return off, true
}

// parseRFC3339 parses "2006-01-02T15:04:05[.fraction](Z|±hh:mm|±hhmm)" as
// time.Parse does with time.RFC3339Nano (a fraction of up to 9 digits; the
// T may be lower case or a space; z may be lower case), and with
// "2006-01-02T15:04:05.999999999-0700" for an offset without its colon.
func parseRFC3339(s string, z *zones) (time.Time, error) {
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' || s[16] != ':' {
		return time.Time{}, errRFC3339
	}
	year, ok1 := num4(s, 0)
	mon, ok2 := num2(s, 5)
	day, ok3 := num2(s, 8)
	hh, ok4 := num2(s, 11)
	mm, ok5 := num2(s, 14)
	ss, ok6 := num2(s, 17)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return time.Time{}, errRFC3339
	}
	rest := s[19:]
	nsec := 0
	if rest != "" && (rest[0] == '.' || rest[0] == ',') {
		i := 1
		scale := 100_000_000
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			if i > 9 {
				return time.Time{}, errRFC3339
			}
			nsec += int(rest[i]-'0') * scale
			scale /= 10
			i++
		}
		if i == 1 {
			return time.Time{}, errRFC3339
		}
		rest = rest[i:]
	}
	off := 0
	switch {
	case rest == "Z" || rest == "z":
	case len(rest) == 6 && rest[3] == ':' || len(rest) == 5: // ±hh:mm, or ±hhmm as Apache's %z and Java write it
		var ok bool
		if off, ok = zoneOffset(rest, len(rest)-2); !ok {
			return time.Time{}, errRFC3339
		}
	default:
		return time.Time{}, errRFC3339
	}
	return civil(year, mon, day, hh, mm, ss, nsec, off, z)
}

// civil builds the instant of a wall-clock time at a zone offset, checking
// each field's range as time.Parse does.
func civil(year, mon, day, hh, mm, ss, nsec, off int, z *zones) (time.Time, error) {
	if mon < 1 || mon > 12 || day < 1 || day > daysIn(mon, year) || hh > 23 || mm > 59 || ss > 59 {
		return time.Time{}, errTimeRange
	}
	days := daysFromCivil(year, mon, day)
	sec := days*86400 + int64(hh*3600+mm*60+ss) - int64(off)
	return time.Unix(sec, int64(nsec)).In(z.get(off)), nil
}

// daysFromCivil is the number of days from 1970-01-01 to the given date of
// the proleptic Gregorian calendar (H. Hinnant's days_from_civil).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := y - era*400
	mp := m + 9
	if m > 2 {
		mp = m - 3
	}
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

func daysIn(m, y int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// monthOf maps a month's three-letter English abbreviation, as time.Parse
// accepts it (any case), to 1-12; 0 when it is none.
func monthOf(s string) int {
	if len(s) != 3 {
		return 0
	}
	// Lower-case the three letters; non-letters cannot match below.
	a, b, c := s[0]|0x20, s[1]|0x20, s[2]|0x20
	switch a {
	case 'j':
		switch {
		case b == 'a' && c == 'n':
			return 1
		case b == 'u' && c == 'n':
			return 6
		case b == 'u' && c == 'l':
			return 7
		}
	case 'f':
		if b == 'e' && c == 'b' {
			return 2
		}
	case 'm':
		switch {
		case b == 'a' && c == 'r':
			return 3
		case b == 'a' && c == 'y':
			return 5
		}
	case 'a':
		switch {
		case b == 'p' && c == 'r':
			return 4
		case b == 'u' && c == 'g':
			return 8
		}
	case 's':
		if b == 'e' && c == 'p' {
			return 9
		}
	case 'o':
		if b == 'c' && c == 't' {
			return 10
		}
	case 'n':
		if b == 'o' && c == 'v' {
			return 11
		}
	case 'd':
		if b == 'e' && c == 'c' {
			return 12
		}
	}
	return 0
}

func num2(s string, i int) (int, bool) {
	a, b := s[i]-'0', s[i+1]-'0'
	if a > 9 || b > 9 {
		return 0, false
	}
	return int(a)*10 + int(b), true
}

func num4(s string, i int) (int, bool) {
	h, ok1 := num2(s, i)
	l, ok2 := num2(s, i+2)
	return h*100 + l, ok1 && ok2
}

// Thresholds telling the units of a numeric timestamp apart: seconds
// below 1e11 (the year 5138), then milliseconds, microseconds, nanoseconds.
const (
	msThreshold = 1e11
	usThreshold = 1e14
	nsThreshold = 1e17
)

// parseUnixTime parses a Unix timestamp written as a decimal number, with
// an optional fraction: seconds, or milliseconds, microseconds or
// nanoseconds, told apart by magnitude (see the thresholds). Exponent
// forms (1.7e9) go through strconv.ParseFloat.
func parseUnixTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, errNumber
	}
	i := 0
	neg := s[0] == '-'
	if neg {
		i++
	}
	start := i
	var whole int64
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := int64(s[i] - '0')
		if whole > (math.MaxInt64-d)/10 {
			return time.Time{}, errNumber
		}
		whole = whole*10 + d
	}
	if i == start {
		return time.Time{}, errNumber
	}
	var frac int64 // nanoseconds of a unit, scaled to 1e9
	if i < len(s) && s[i] == '.' {
		i++
		scale := int64(100_000_000)
		fstart := i
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			frac += int64(s[i]-'0') * scale
			scale /= 10
		}
		if i == fstart {
			return time.Time{}, errNumber
		}
	}
	if i != len(s) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f != f || f > 9e18 || f < -9e18 {
			return time.Time{}, errNumber
		}
		return unixFloat(f), nil
	}
	var sec, nsec int64
	switch {
	case whole < msThreshold:
		sec, nsec = whole, frac
	case whole < usThreshold:
		sec, nsec = whole/1e3, (whole%1e3)*1e6+frac/1e3
	case whole < nsThreshold:
		sec, nsec = whole/1e6, (whole%1e6)*1e3+frac/1e6
	default:
		sec, nsec = whole/1e9, whole%1e9
	}
	if neg {
		sec, nsec = -sec, -nsec
	}
	return time.Unix(sec, nsec).UTC(), nil
}

// unixFloat converts a JSON number holding a Unix timestamp (units told
// apart by magnitude as in parseUnixTime).
func unixFloat(f float64) time.Time {
	switch a := math.Abs(f); {
	case a >= nsThreshold:
		f /= 1e9
	case a >= usThreshold:
		f /= 1e6
	case a >= msThreshold:
		f /= 1e3
	}
	sec := math.Floor(f)
	return time.Unix(int64(sec), int64((f-sec)*1e9)).UTC()
}
