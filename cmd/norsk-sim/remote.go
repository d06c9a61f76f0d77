package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/norsk-go/norsk-manager/internal/sim"
)

// remote is a running cluster named by its members' URLs. The simulator
// cannot see inside its processes: its figures of memory and CPU are the
// members' own /metrics would give, and are not measured here.
type remote struct {
	urls  []string
	token string
}

func (r remote) Members() []sim.Member {
	out := make([]sim.Member, 0, len(r.urls))
	for i, u := range r.urls {
		out = append(out, sim.Member{Name: fmt.Sprintf("member-%d", i+1), URL: u})
	}
	return out
}

func (r remote) Token() string { return r.token }

func (r remote) Stats(context.Context, string) (sim.ProcessStats, error) {
	return sim.ProcessStats{}, nil
}

func (r remote) Kill(context.Context, string, <-chan struct{}) error {
	return errors.New("cannot take a member of a running cluster away")
}
