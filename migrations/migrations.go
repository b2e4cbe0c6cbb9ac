// Package migrations holds billingd's schema as golang-migrate SQL files,
// embedded so that the binary can migrate a database on its own.
package migrations

import "embed"

// FS holds the *.up.sql and *.down.sql files.
//
//go:embed *.sql
var FS embed.FS
