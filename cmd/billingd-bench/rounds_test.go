package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		values   []float64
		want     spread
		relative float64
	}{
		{"none", nil, spread{}, 0},
		{"one round", []float64{300}, spread{300, 300, 300}, 0},
		{"odd count: the middle one, whatever the order", []float64{330, 270, 300}, spread{300, 270, 330}, 0.2},
		{"even count: the mean of the middle two", []float64{400, 100, 300, 200}, spread{250, 100, 400}, 1.2},
		{"an outlier moves the range, not the median", []float64{500, 495, 1000, 505, 250}, spread{500, 250, 1000}, 1.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := spreadOf(tc.values)
			if got != tc.want {
				t.Errorf("spreadOf(%v) = %+v, want %+v", tc.values, got, tc.want)
			}
			if r := got.relative(); r < tc.relative-1e-9 || r > tc.relative+1e-9 {
				t.Errorf("relative() = %v, want %v", r, tc.relative)
			}
		})
	}
}

// TestAlternateInterleavesTheSides: a row runs billingd, then the mirror,
// then billingd again…, never two runs of one side in a row, and each
// side's rounds come back in the order they ran.
func TestAlternateInterleavesTheSides(t *testing.T) {
	var ran []string
	run := func(name string) func(int) (summary, error) {
		return func(round int) (summary, error) {
			ran = append(ran, fmt.Sprintf("%s %d", name, round))
			return summary{rate: float64(round)}, nil
		}
	}
	billingd, mirror, err := alternate(3, run("billingd"), run("mirror"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"billingd 1", "mirror 1", "billingd 2", "mirror 2", "billingd 3", "mirror 3"}
	if !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
	for name, s := range map[string]side{"billingd": billingd, "mirror": mirror} {
		if len(s) != 3 || s[0].rate != 1 || s[1].rate != 2 || s[2].rate != 3 {
			t.Errorf("%s's rounds: %+v, want rounds 1, 2, 3 in order", name, s)
		}
	}
}

func TestAlternateStopsAtAFailure(t *testing.T) {
	runs := 0
	ok := func(int) (summary, error) { runs++; return summary{}, nil }
	fail := func(round int) (summary, error) {
		runs++
		if round == 2 {
			return summary{}, errors.New("pgbench: too many connections")
		}
		return summary{}, nil
	}
	_, _, err := alternate(3, ok, fail)
	if err == nil || !strings.Contains(err.Error(), "mirror, round 2") {
		t.Errorf("err = %v, want one naming the mirror's round 2", err)
	}
	if runs != 4 {
		t.Errorf("%d runs, want 4 (nothing after the failure)", runs)
	}
}

func TestSideFigures(t *testing.T) {
	s := side{
		{rate: 500, p50: 10 * time.Millisecond, p99: 40 * time.Millisecond, max: 90 * time.Millisecond, errors: 1, cpu: cpuPerOp{billingd: 900, postgres: 1500}},
		{rate: 300, p50: 16 * time.Millisecond, p99: 80 * time.Millisecond, max: 300 * time.Millisecond, shed: 4, cpu: cpuPerOp{billingd: 1100, postgres: 1900}},
		{rate: 450, p50: 11 * time.Millisecond, p99: 45 * time.Millisecond, max: 70 * time.Millisecond, errors: 2, cpu: cpuPerOp{billingd: 1000, postgres: 1600}},
	}
	if got := s.rate(); got != (spread{450, 300, 500}) {
		t.Errorf("rate() = %+v", got)
	}
	if got := s.p99(); got != (spread{45, 40, 80}) {
		t.Errorf("p99() = %+v (ms)", got)
	}
	if got := s.medianP50(); got != 11*time.Millisecond {
		t.Errorf("medianP50() = %v", got)
	}
	if got := s.cpu(cpuTotal); got != (spread{2600, 2400, 3000}) {
		t.Errorf("cpu(total) = %+v", got)
	}
	if s.longest() != 300*time.Millisecond || s.errors() != 3 || s.shed() != 4 {
		t.Errorf("longest %v, errors %d, shed %d; want 300ms, 3, 4", s.longest(), s.errors(), s.shed())
	}
	if got := s.typical(); got.rate != 450 {
		t.Errorf("typical() is the round at %v/s, want the median one (450/s)", got.rate)
	}
	if got := s[:2].typical(); got.rate != 300 {
		t.Errorf("typical() of two rounds is the one at %v/s, want the lower (300/s)", got.rate)
	}
}

// TestComparisonRatio: the ratio is of the medians; its range is the
// round pairs' ratios, each billingd round against the mirror's next run.
func TestComparisonRatio(t *testing.T) {
	c := comparison{
		service: side{{rate: 300}, {rate: 600}, {rate: 450}},
		pgbench: side{{rate: 600}, {rate: 900}, {rate: 1000}},
	}
	got := c.ratio()
	want := spread{median: 0.5, min: 0.45, max: 600.0 / 900}
	if got != want {
		t.Errorf("ratio() = %+v, want %+v", got, want)
	}
	if got := (comparison{service: side{{rate: 1}}, pgbench: side{{rate: 0}}}).ratio(); got != (spread{}) {
		t.Errorf("ratio() with a mirror that did nothing = %+v, want zero", got)
	}
}
