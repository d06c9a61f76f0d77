//go:build !linux

package main

import (
	"errors"
	"time"
)

// raisePriority: real-time pacing is implemented on Linux only.
func raisePriority(int) error {
	return errors.New("real-time priority is not implemented on this system")
}

func lowerPriority() error { return nil }

func sleepUntil(time.Time) {}
