package server

import (
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
)

type slowBackend struct {
	fakeBackend
	max time.Duration
}

func (b *slowBackend) MaxAnswer() time.Duration { return b.max }

type slowCaller struct {
	fakeCaller
	max time.Duration
}

func (c *slowCaller) MaxAnswer() time.Duration { return c.max }

// TestWriteTimeoutFollowsTheLongestAnswer: the write timeout is the
// longest answer the backend or the caller says it may take, plus the time
// to write it. Raised waits (a --pool-wait or --tool-ready-timeout of ten
// minutes) raise it with them: the literal it replaces, 320 s, would have
// cut such answers off.
func TestWriteTimeoutFollowsTheLongestAnswer(t *testing.T) {
	const oldLiteral = 30*time.Second + 110*time.Second + api.MaxCallTimeoutS*time.Second + time.Minute
	for _, tt := range []struct {
		name    string
		backend Backend
		caller  Caller
		longest time.Duration
	}{
		{"a backend that does not say", &fakeBackend{}, nil, api.MaxTimeoutS * time.Second},
		{"a pool that waits ten minutes for a pod", &slowBackend{max: 10*time.Minute + 85*time.Second}, nil, 10*time.Minute + 85*time.Second},
		{"tool pods ready within fifteen minutes", &slowBackend{max: 2 * time.Minute},
			&slowCaller{max: 15*time.Minute + 175*time.Second}, 15*time.Minute + 175*time.Second},
		{"a caller shorter than the backend", &slowBackend{max: 20 * time.Minute}, &slowCaller{max: time.Minute}, 20 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Options{Backend: tt.backend, Caller: tt.caller})
			if err != nil {
				t.Fatal(err)
			}
			got := s.writeTimeout()
			if got != tt.longest+writeSlack {
				t.Errorf("write timeout %s, want %s", got, tt.longest+writeSlack)
			}
			if tt.longest > oldLiteral {
				t.Logf("the old literal, %s, would have cut off an answer of %s", oldLiteral, tt.longest)
			}
		})
	}
}
