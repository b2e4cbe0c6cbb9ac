package main

import (
	"context"
	"errors"
)

// devCmd: billingd dev manages PostgreSQL and stripe-mock as Unix process
// groups, which Windows lacks.
func devCmd(ctx context.Context, e env, args []string) error {
	return errors.New("billingd dev runs on Linux and macOS; on Windows, run it in WSL, or run billingd serve with DATABASE_URL, STRIPE_SECRET_KEY and OAUTH_ISSUER")
}
