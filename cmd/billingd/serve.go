package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/billingd/billingd/internal/app"
)

// shutdownGrace is how long in-flight requests get to finish after SIGTERM.
const shutdownGrace = 30 * time.Second

func serve(ctx context.Context, e env, args []string) error {
	fs := flags(e, "serve", "serve")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(e, "DATABASE_URL", "STRIPE_SECRET_KEY", "OAUTH_ISSUER")
	if err != nil {
		return err
	}
	a, err := app.New(ctx, cfg, app.Options{LogOutput: e.stderr})
	if err != nil {
		return err
	}
	defer a.Close()
	go a.RunPurge(ctx)
	go a.RunSettle(ctx)
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on LISTEN_ADDR %s: %w", cfg.ListenAddr, err)
	}
	a.Log.Info("billingd listening", "addr", ln.Addr().String(), "public_base_url", cfg.PublicBaseURL)
	return serveUntilDone(ctx, httpServer(a), ln)
}

// httpServer is the HTTP server of serve and dev: timeouts that let a second
// call wait for Stripe but not a slow client hold a connection forever.
func httpServer(a *app.App) *http.Server {
	return &http.Server{
		Handler:           a.Handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      a.Config.StripeTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

// serveUntilDone serves until ctx ends (SIGINT/SIGTERM), then stops accepting
// connections and lets in-flight requests finish.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
