package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

// res is a round that made n decisions in one second.
func res(n int64) *result { return &result{decisions: n, elapsed: time.Second} }

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{0.80, 1.05, 0.93}, 0.93},
	} {
		in := slices.Clone(c.in)
		if got := median(in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median modified its argument: %v", in)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
}

func TestMedianRound(t *testing.T) {
	a, b, c, d := res(100), res(300), res(200), res(400)
	if got := medianRound([]*result{a, b, c}); got != c {
		t.Errorf("odd count: got rate %v, want 200", got.rate())
	}
	if got := medianRound([]*result{d, a, b, c}); got != c {
		t.Errorf("even count: got rate %v, want the lower middle 200", got.rate())
	}
	if got := medianRound([]*result{nil, b, nil}); got != b {
		t.Errorf("with failed rounds: got %v, want 300", got)
	}
	if got := medianRound([]*result{nil}); got != nil {
		t.Errorf("no round ran: got %v, want nil", got)
	}
}

func TestRoundRatios(t *testing.T) {
	num := []*result{res(80), res(105), nil, res(50)}
	den := []*result{res(100), res(100), res(100), nil}
	got := roundRatios(num, den)
	if want := []float64{0.80, 1.05}; !slices.Equal(got, want) {
		t.Errorf("roundRatios = %v, want %v", got, want)
	}
	if got := roundRatios(num, nil); len(got) != 0 {
		t.Errorf("no denominator: %v", got)
	}
}
