package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/norsk-go/norsk-manager/sdk/norsk"
)

// watchSettle is how long a watch lets a burst of events settle before it
// prints again: a bundle's creation is dozens of events, one reprint.
const watchSettle = 250 * time.Millisecond

// Watchable gives a list command --watch (-w): print the list, then again
// after every burst of the Manager's events, until interrupted (as
// kubectl get -w and nomad status -watch do).
func Watchable(g *Globals, cmd *cobra.Command) *cobra.Command {
	var watch bool
	list := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !watch {
			return list(cmd, args)
		}
		return watchList(g, cmd, func() error { return list(cmd, args) })
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print the list again after every change, until interrupted")
	return cmd
}

// watchList runs list, then again once the events of each change have
// settled. The event stream is opened before the first list, so no change
// after it goes unseen.
func watchList(g *Globals, cmd *cobra.Command, list func() error) error {
	ctx := cmd.Context()
	m, err := g.Manager(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := m.EventStream(ctx, norsk.EventStreamSettings{SkipSnapshot: true})
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() { // owned here: ends when the stream does (cancel, Close)
		defer close(done)
		for s.Next() {
			select {
			case changed <- struct{}{}:
			default: // a reprint is pending already
			}
		}
	}()
	defer func() { cancel(); s.Close(); <-done }()

	if err := list(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil // interrupted: the normal end
		case <-done:
			if err := s.Err(); err != nil && !(errors.Is(err, norsk.ErrCanceled) && ctx.Err() != nil) {
				return fmt.Errorf("watch: event stream: %w", err)
			}
			return nil
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(watchSettle):
		}
		select {
		case <-changed: // folded into this print
		default:
		}
		if g.Human() {
			fmt.Fprintf(g.Out, "\n--- %s\n", g.Now().UTC().Format(time.RFC3339))
		}
		if err := list(); err != nil {
			return err
		}
	}
}
