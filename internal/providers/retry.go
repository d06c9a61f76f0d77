package providers

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/norsk-go/norsk-manager/internal/clock"
)

// Backoff bounds the retries of a throttled call: Attempts in all, the n-th
// wait drawn uniformly from [0, min(Max, Base·2ⁿ)] ("full jitter", as the
// AWS SDKs back off), so callers throttled together do not retry together.
type Backoff struct {
	Attempts int
	Base     time.Duration
	Max      time.Duration
}

func (b Backoff) withDefaults() Backoff {
	if b.Attempts <= 0 {
		b.Attempts = 5
	}
	if b.Base <= 0 {
		b.Base = time.Second
	}
	if b.Max <= 0 {
		b.Max = 20 * time.Second
	}
	return b
}

// Wait is the n-th wait (n from 0).
func (b Backoff) Wait(n int) time.Duration {
	ceil := b.Base << min(n, 30)
	if ceil <= 0 || ceil > b.Max {
		ceil = b.Max
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// retry calls fn until it succeeds, fails with anything but ErrThrottled,
// or the attempts run out (the last error is returned).
func (b Backoff) retry(ctx context.Context, clk clock.Clock, fn func() error) error {
	var err error
	for n := 0; n < b.Attempts; n++ {
		if err = fn(); err == nil || !errors.Is(err, ErrThrottled) {
			return err
		}
		if n == b.Attempts-1 {
			break
		}
		t := clk.NewTimer(b.Wait(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C():
		}
	}
	return err
}
