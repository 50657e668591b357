package kindenv

import (
	"fmt"
	"io"
	"sync"

	"sigs.k8s.io/kind/pkg/log"
)

// logger is kind's log.Logger writing to one writer: warnings and errors
// always, info up to verbosity 0 (kind's progress lines).
type logger struct {
	mu sync.Mutex
	w  io.Writer
}

func newLogger(w io.Writer) *logger { return &logger{w: w} }

func (l *logger) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}

func (l *logger) Warn(message string)               { l.printf("WARNING: %s", message) }
func (l *logger) Warnf(format string, args ...any)  { l.printf("WARNING: "+format, args...) }
func (l *logger) Error(message string)              { l.printf("ERROR: %s", message) }
func (l *logger) Errorf(format string, args ...any) { l.printf("ERROR: "+format, args...) }
func (l *logger) V(level log.Level) log.InfoLogger  { return infoLogger{l: l, on: level <= 0} }

type infoLogger struct {
	l  *logger
	on bool
}

func (i infoLogger) Info(message string) {
	if i.on {
		i.l.printf("%s", message)
	}
}

func (i infoLogger) Infof(format string, args ...any) {
	if i.on {
		i.l.printf(format, args...)
	}
}

func (i infoLogger) Enabled() bool { return i.on }
