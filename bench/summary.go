package main

// Reducing rounds to the figures a report shows.

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// median is the median of xs (the mean of the two middle values for an even
// count), NaN for none. xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// medianRound is the round whose rate is the median of the rounds that ran
// (the lower middle one for an even count), nil if none ran.
func medianRound(rs []*result) *result {
	var ran []*result
	for _, r := range rs {
		if r != nil {
			ran = append(ran, r)
		}
	}
	if len(ran) == 0 {
		return nil
	}
	slices.SortStableFunc(ran, func(a, b *result) int {
		switch ra, rb := a.rate(), b.rate(); {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	return ran[(len(ran)-1)/2]
}

// roundRatios is, for every round in which both ran, num's rate over den's
// rate in that round.
func roundRatios(num, den []*result) []float64 { return roundRatiosOf(num, den, (*result).rate) }

// roundRatiosOf is, for every round in which both ran, f of num over f of
// den in that round (rounds where f of den is not positive are left out).
func roundRatiosOf(num, den []*result, f func(*result) float64) []float64 {
	var out []float64
	for i := range min(len(num), len(den)) {
		if num[i] == nil || den[i] == nil || f(den[i]) <= 0 {
			continue
		}
		out = append(out, f(num[i])/f(den[i]))
	}
	return out
}

// num formats v, or "-" for a figure there is none of (NaN).
func num(v float64, format string) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

type reportHeader struct {
	conc     int
	duration time.Duration
	rounds   int
	loadAvg  string
}
