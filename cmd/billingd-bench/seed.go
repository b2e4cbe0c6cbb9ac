package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/config"
	"github.com/billingd/billingd/internal/devissuer"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// orgBase numbers the seeded orgs: org j is "<orgBase+j>" and its principals
// are "<org*100+k>", k = 1…principals. pgbench variables are integers, so
// ids made of digits let the pgbench scripts bind them exactly as billingd
// does, with no SQL of their own to build strings.
const orgBase = 1000

// benchClient is the azp of every bench token: the agent in the audit log.
const benchClient = "billingd-bench"

// account is one seeded org as the load generator sees it. Only the client
// that owns the org (see clientAccounts) touches it during a run.
type account struct {
	id    string
	num   int
	plan  string // the current plan, kept in step with billingd's
	users []user
	next  int // round robin over users
}

// user is one principal of an org with a signed access token.
type user struct {
	sub    string
	bearer string
}

// nextChange is the plan change to make next: an upgrade to Scale, or a
// downgrade back to Pro once the org is on Scale, so that handshakes can go
// on forever.
func (a *account) nextChange() (path, to string) {
	if a.plan == "scale" {
		return "/api/billing/downgrade", "pro"
	}
	return "/api/billing/upgrade", "scale"
}

func (a *account) nextUser() user {
	u := a.users[a.next%len(a.users)]
	a.next++
	return u
}

// openBenchPool opens the bench's own pool, named so that no side's
// backends include it (benchApplicationName).
func openBenchPool(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	return postgres.Open(ctx, dbURL, postgres.PoolConfig{Name: benchApplicationName})
}

// seed opens the bench's own pool, creates the orgs through the billing
// service (Stripe customer and subscription at the stand-in, then the rows)
// and mints an access token per principal.
func (e *env) seed(ctx context.Context) error {
	pool, err := openBenchPool(ctx, e.dbURL)
	if err != nil {
		return err
	}
	e.pool = pool
	e.cleanup(pool.Close)
	if e.cfg, err = e.serviceConfig(); err != nil {
		return err
	}
	svc, err := app.NewService(e.cfg, postgres.NewStore(pool), nil, nil)
	if err != nil {
		return err
	}
	e.accounts = make([]*account, e.opts.orgs)
	create := func(id string) error {
		_, err := svc.CreateOrg(ctx, id, "Bench Org "+id, "billing@org"+id+".example", "pro")
		return err
	}
	// A few workers: each org is two Stripe requests and a batch, mostly
	// waiting; one at a time would take seconds per thousand orgs.
	const workers = 8
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w; j < len(e.accounts) && errs[w] == nil; j += workers {
				e.accounts[j], errs[w] = e.newAccount(j, create)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.warnRateLimit()
	return nil
}

// warnRateLimit says when the load could run into billingd's rate limit:
// spread evenly, the principals can make this many first calls per second
// before any of them reaches RATE_LIMIT_PROPOSALS in RATE_LIMIT_WINDOW. A 429
// would be the load's fault, not billingd's.
func (e *env) warnRateLimit() {
	rl := e.cfg.RateLimits
	if rl.Proposals == 0 {
		return
	}
	perSecond := float64(e.opts.orgs*e.opts.principals*rl.Proposals) / rl.Window.Seconds()
	e.log.Printf("rate limit: %d first calls per principal per %s; %d principals can make %.0f a second",
		rl.Proposals, rl.Window, e.opts.orgs*e.opts.principals, perSecond)
	if perSecond < 5000 {
		e.log.Printf("WARNING: faster runs will get 429 rate_limited: raise -orgs or -principals")
	}
}

// newAccount creates org j with create and mints its principals' tokens.
func (e *env) newAccount(j int, create func(id string) error) (*account, error) {
	num := orgBase + j
	a := &account{id: strconv.Itoa(num), num: num, plan: "pro"}
	if err := create(a.id); err != nil {
		return nil, fmt.Errorf("create org %s: %w", a.id, err)
	}
	for k := 1; k <= e.opts.principals; k++ {
		sub := strconv.Itoa(num*100 + k)
		bearer, err := e.issuer.Mint(devissuer.Claims{
			Subject: sub, Org: a.id, Client: benchClient,
			Scopes: []string{"billing:read", "billing:write"}, Audience: []string{e.baseURL},
			TTL: 3 * time.Hour, // outlives any run
		})
		if err != nil {
			return nil, err
		}
		a.users = append(a.users, user{sub: sub, bearer: bearer})
	}
	return a, nil
}

// serviceConfig is billingd's configuration as the bench's in-process
// services (seeding, round-trip counting) use it: the same database, Stripe
// stand-in and issuer as the billingd process.
func (e *env) serviceConfig() (config.Config, error) {
	vars := map[string]string{"DATABASE_URL": e.dbURL}
	for _, kv := range e.billingdEnv() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	return config.Load(func(k string) string { return vars[k] })
}
