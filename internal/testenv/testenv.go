// Package testenv gives tests the real components they run against: a
// PostgreSQL database of their own, created from a migrated template, a
// stripe-mock server and an OpenID provider (ORY Hydra). On CI (CI=true) a missing component fails the test;
// elsewhere it skips it with a message saying what to install.
package testenv

import (
	"os"
	"testing"
)

// onCI reports whether missing components must fail rather than skip tests.
func onCI() bool { return os.Getenv("CI") == "true" }

// missing fails (on CI) or skips (elsewhere) a test that lacks a component.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if onCI() {
		t.Fatalf("CI=true and "+format, args...)
	}
	t.Skipf(format, args...)
}
