package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// logger prints progress lines with the time since the bench started, so a
// slow step shows where the ten minutes go.
type logger struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newLogger(w io.Writer) *logger { return &logger{w: w, start: time.Now()} }

func (l *logger) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "[%6.1fs] %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(format, args...))
}
