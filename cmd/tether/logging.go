package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// logFlags choose the controller's log: one slog logger for everything tether serve logs (its
// own lines, request logs, provider plugins' lines).
type logFlags struct {
	format, level string
}

var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// logger makes the logger the flags ask for, writing to w; a flag out of its set is a usage
// error, and nothing is logged.
func (f logFlags) logger(w io.Writer) (*slog.Logger, error) {
	level, ok := logLevels[strings.ToLower(f.level)]
	if !ok {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", f.level)}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(f.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", f.format)}
}
