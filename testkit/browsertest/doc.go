// Package browsertest drives the support console in a real browser
// (Debian's Chromium, headless, through the DevTools protocol) against
// nodes started in the test process on their own databases.
//
// The tests carry the build tag "browser", so the main suite neither needs
// a browser nor pays for one; CI runs them as a step of their own:
//
//	go test -tags browser -count=1 -timeout 10m ./testkit/browsertest/
//
// REBILL_CHROMIUM names the browser binary (default /usr/bin/chromium).
// REBILL_SCREENSHOTS=dir also writes PNGs of the console's main pages into
// dir, the ones docs/console.md shows.
package browsertest
