// Package drill holds the database drills, which judge rebill from the
// outside world's books: a simulated gateway whose book lives in another
// database, behind a proxy counting look-ups and replays, the registry
// party fines are posted through, in the test's process, and `rebill
// audit`. The failover drill (drill_test.go) runs a primary and a
// streaming replica from the machine's PostgreSQL binaries, two rebill
// nodes on a multi-host DATABASE_URL, billing load (subscriptions with
// dunning, refunds, price changes, fines and housing bills: autopay_test.go),
// then kills the primary and promotes the replica. The restore drill (restore_test.go)
// takes a base backup of the running primary, keeps billing, then
// restores the backup and has the clients retry what it lost. Run them by
// hand with
//
//	go test -count=1 ./drill -run 'TestFailoverDrill|TestRestoreDrill' -drill.long -v
//
// and see docs/testing.md.
package drill
