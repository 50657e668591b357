package api

import (
	"context"
	"testing"
	"time"
)

func TestTimingHeaderRoundTrip(t *testing.T) {
	ctx, tm := WithTiming(context.Background())
	TimingOf(ctx).Add(TimingClaim, 1500*time.Microsecond)
	TimingOf(ctx).Add(TimingRunner, 30*time.Millisecond)
	// A second pod tried: its claim adds to the first.
	TimingOf(ctx).Add(TimingClaim, 500*time.Microsecond)
	h := tm.Header()
	if want := "claim;dur=2.000, runner;dur=30.000"; h != want {
		t.Errorf("header %q, want %q", h, want)
	}
	got := ParseServerTiming(h)
	if len(got) != 2 || got[TimingClaim] != 2 || got[TimingRunner] != 30 {
		t.Errorf("parsed %v", got)
	}
}

func TestTimingNilTakesNothing(t *testing.T) {
	tm := TimingOf(context.Background())
	tm.Add(TimingTotal, time.Second) // must not panic
	if h := tm.Header(); h != "" {
		t.Errorf("a nil Timing's header is %q", h)
	}
}

func TestParseServerTimingOthers(t *testing.T) {
	got := ParseServerTiming(`cache;desc="hit", db;dur=53.2;desc="x", app;desc=a;dur=4, ;dur=1, bad;dur=x`)
	if len(got) != 2 || got["db"] != 53.2 || got["app"] != 4 {
		t.Errorf("parsed %v, want db 53.2 and app 4 only", got)
	}
}
