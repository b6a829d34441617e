// Package drill holds the failover drill (drill_test.go): a primary and a
// streaming replica started from the machine's PostgreSQL binaries, two
// rebill nodes on a multi-host DATABASE_URL, a simulated gateway whose book
// lives in another database (it stands for the outside world), billing
// load, the primary killed and the replica promoted, then a judgement from
// the gateway's book and `rebill audit`. Run it by hand with
//
//	go test -count=1 ./drill -run TestFailoverDrill -drill.long -v
//
// and see docs/testing.md.
package drill
