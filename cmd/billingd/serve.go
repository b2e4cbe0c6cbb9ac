package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/tracing"
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
	log := app.NewLogger(cfg, e.stderr)
	traces, err := tracing.Setup(ctx, e.getenv, log)
	if err != nil {
		return err
	}
	defer flushTraces(ctx, traces, log)
	a, err := app.New(ctx, cfg, app.Options{Logger: log, Tracing: traces})
	if err != nil {
		return err
	}
	defer a.Close()
	go a.RunPurge(ctx)
	go a.RunSettle(ctx)
	go a.RunWebhooks(ctx)
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on LISTEN_ADDR %s: %w", cfg.ListenAddr, err)
	}
	metricsLn, err := listenMetrics(cfg.MetricsAddr)
	if err != nil {
		ln.Close()
		return err
	}
	logListening(a, ln, metricsLn)
	return serveUntilDone(ctx, a, ln, metricsLn)
}

// traceFlushGrace bounds how long sending the last spans may delay exit.
const traceFlushGrace = 5 * time.Second

// flushTraces sends the spans not yet sent (after the requests and rounds
// that made them have ended) and stops tracing.
func flushTraces(ctx context.Context, traces *tracing.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushGrace)
	defer cancel()
	if err := traces.Shutdown(ctx); err != nil {
		log.Warn("traces: spans not sent at exit", "err", err)
	}
}

// listenMetrics opens the metrics listener (METRICS_ADDR), or none when
// metrics are off.
func listenMetrics(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on METRICS_ADDR %s (off disables it): %w", addr, err)
	}
	return ln, nil
}

func logListening(a *app.App, ln, metricsLn net.Listener) {
	metrics := "off"
	if metricsLn != nil {
		metrics = "http://" + metricsLn.Addr().String() + "/metrics"
	}
	a.Log.Info("billingd listening", "addr", ln.Addr().String(), "public_base_url", a.Config.PublicBaseURL, "metrics", metrics)
}

// serveUntilDone serves the API on ln and the metrics on metricsLn (when
// not nil) until ctx ends (SIGINT/SIGTERM), then stops accepting
// connections and lets in-flight requests finish.
func serveUntilDone(ctx context.Context, a *app.App, ln, metricsLn net.Listener) error {
	servers := []*http.Server{app.HTTPServer(a.Config, a.Handler)}
	listeners := []net.Listener{ln}
	if metricsLn != nil {
		servers = append(servers, app.HTTPServer(a.Config, a.MetricsHandler))
		listeners = append(listeners, metricsLn)
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errc <- srv.Serve(listeners[i]) }()
	}
	select {
	case err := <-errc:
		for _, srv := range servers {
			srv.Close()
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	var errs []error
	for _, srv := range servers {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: %w", err))
		}
	}
	for range servers {
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("serve: %w", err))
		}
	}
	return errors.Join(errs...)
}
