// Package devenv brings up everything billingd needs on one machine, for
// billingd dev (contract §9): a PostgreSQL (DATABASE_URL when set, else a
// private cluster made with the installed initdb, else a testcontainers one
// when Docker runs), a Stripe stand-in unless STRIPE_SECRET_KEY is set (the
// stateful internal/stripepay/stripepaytest served on loopback by this process, or
// stripe-mock) and a development token issuer. It then seeds a demo org and
// prints how to reach the server: the dashboard, curl commands with tokens,
// and MCP client configurations.
//
// The private cluster lives in .dev/pg of the working directory. As root it
// cannot: initdb and postgres refuse to run as root, so they run as user
// postgres, which cannot enter /root or a mktemp -d directory (mode 700).
// Root's cluster therefore lives in a directory of its own per checkout,
// /var/lib/billingd-dev/<checkout>-<hash>, owned by postgres; the welcome
// text names it. The Stripe fake's state is kept next to the cluster, since
// the database's Stripe ids are only good together with it.
//
// Everything here is for development only. The issuer signs any token it is
// asked for, so dev mode refuses to listen on anything but loopback.
//
// Every process devenv starts runs in its own process group, so that Ctrl-C
// in a terminal reaches billingd alone, which then stops the server first and
// its helpers after; and with a parent-death signal, so that a billingd killed
// outright (SIGKILL) takes them along instead of leaving strays.
package devenv
