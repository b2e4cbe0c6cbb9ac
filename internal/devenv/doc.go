// Package devenv brings up everything billingd needs on one machine, for
// billingd dev (contract §9): a PostgreSQL (DATABASE_URL when set, else a
// private cluster under .dev/pg made with the installed initdb, else a
// testcontainers one when Docker runs), a Stripe stand-in (stripe-mock on
// loopback, unless STRIPE_SECRET_KEY is set) and a development token issuer.
// It then seeds a demo org and prints how to reach the server: the dashboard,
// curl commands with tokens, and MCP client configurations.
//
// Everything here is for development only. The issuer signs any token it is
// asked for, so dev mode refuses to listen on anything but loopback.
//
// Every process devenv starts runs in its own process group, so that Ctrl-C
// in a terminal reaches billingd alone, which then stops the server first and
// its helpers after; and with a parent-death signal, so that a billingd killed
// outright (SIGKILL) takes them along instead of leaving strays.
package devenv
