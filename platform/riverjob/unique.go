// Package riverjob holds the uniqueness rules rebill's River jobs share,
// so that every kind that means "never twice" or "one at a time" means it
// the same way. River keys uniqueness on the set of states (a bitmask), not
// their order, so jobs already queued stay unique against new ones.
package riverjob

import (
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// UniqueForever makes a job unique by its tagged args in every state,
// discarded and cancelled included, so that no path can enqueue the same
// step twice (River's default states omit both).
func UniqueForever() river.UniqueOpts {
	return river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStateCancelled, rivertype.JobStateCompleted,
		rivertype.JobStateDiscarded, rivertype.JobStatePending, rivertype.JobStateRetryable,
		rivertype.JobStateRunning, rivertype.JobStateScheduled,
	}}
}

// OneAtATime allows one pending or running job of a kind: a trigger while
// one runs is absorbed, and the running one works from database state.
func OneAtATime() river.UniqueOpts {
	return river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateScheduled, rivertype.JobStateRetryable,
	}}
}
