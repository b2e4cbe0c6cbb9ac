package devenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// StripeStandIn names what billingd dev answers Stripe's API with when
// STRIPE_SECRET_KEY is unset.
type StripeStandIn string

const (
	// StripeFake is internal/stripepay/stripepaytest, served by billingd dev itself: it
	// keeps customers and subscriptions (across restarts too), honours
	// idempotency keys and prorates from the real period, so the demo
	// shows today's dates and real amounts. The default.
	StripeFake StripeStandIn = "fake"
	// StripeMock is stripe-mock, Stripe's own stateless stand-in: every
	// request succeeds with the same fixtures (dates of 2009, fixed
	// amounts). It checks requests against Stripe's OpenAPI description.
	StripeMock StripeStandIn = "mock"
)

// ParseStripeStandIn reads the --stripe flag (or BILLINGD_DEV_STRIPE); empty
// means the default, the fake.
func ParseStripeStandIn(s string) (StripeStandIn, error) {
	switch StripeStandIn(s) {
	case "", StripeFake:
		return StripeFake, nil
	case StripeMock:
		return StripeMock, nil
	}
	return "", fmt.Errorf("unknown Stripe stand-in %q: fake (the default: stateful, real dates and proration) or mock (stripe-mock)", s)
}

// fakeStateFile holds the fake's customers and subscriptions, next to the
// database whose orgs point at them.
const fakeStateFile = "stripe-fake.json"

// demoSubscriptionAge is how long ago the demo org's subscription started,
// on the fake: a plan bought a moment ago prorates to its whole price
// difference, so the demo's first upgrade would show no proration at all.
const demoSubscriptionAge = 12*24*time.Hour + 8*time.Hour

// fakeStripe is the fake, served on a loopback port, saving its state after
// every request that may change it, so that a billingd killed outright
// (SIGKILL) loses nothing the database already points at.
type fakeStripe struct {
	fake      *stripepaytest.Server
	statePath string
	srv       *http.Server
	base      string
	progress  io.Writer
	saveMu    sync.Mutex // one save at a time, so the newest state is the one kept
}

// startFakeStripe serves the fake with the prices of plans and the state
// saved in dir, if any.
func startFakeStripe(plans []billing.Plan, dir string, progress io.Writer) (*fakeStripe, error) {
	f := &fakeStripe{fake: stripepaytest.New(), statePath: filepath.Join(dir, fakeStateFile), progress: progress}
	for _, p := range plans {
		f.fake.SetPrice(p.StripePriceID, p.AmountCents, p.Currency)
	}
	if err := f.load(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("serve the Stripe fake: %w", err)
	}
	f.srv = &http.Server{Handler: f.savingAfterChanges(f.fake.Handler()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	f.base = "http://" + ln.Addr().String()
	return f, nil
}

// stop closes the server and saves the state one last time.
func (f *fakeStripe) stop() error {
	return errors.Join(f.srv.Close(), f.save())
}

// savingAfterChanges saves the state after every request but a GET.
func (f *fakeStripe) savingAfterChanges(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.Method != http.MethodGet {
			if err := f.save(); err != nil {
				fmt.Fprintf(f.progress, "billingd dev: %v\n", err)
			}
		}
	})
}

// hasFakeState reports whether dir holds a saved state of the fake.
func hasFakeState(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, fakeStateFile))
	return err == nil
}

// load restores the saved state, if there is one, with every period that
// ended since rolled forward: the fake's periods never renew, and Stripe
// refuses to prorate outside the current one.
func (f *fakeStripe) load() error {
	data, err := os.ReadFile(f.statePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the Stripe fake's state: %w", err)
	}
	var st stripepaytest.State
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("read the Stripe fake's state %s: %w (remove it, and the database, to start afresh)", f.statePath, err)
	}
	now := time.Now()
	for i := range st.Subscriptions {
		renew(&st.Subscriptions[i], now)
	}
	f.fake.Restore(st)
	return nil
}

// renew moves sub's current period forward, a period at a time, until it
// holds now.
func renew(sub *stripepaytest.Subscription, now time.Time) {
	length := sub.CurrentPeriodEnd.Sub(sub.CurrentPeriodStart)
	for length > 0 && now.After(sub.CurrentPeriodEnd) {
		sub.CurrentPeriodStart, sub.CurrentPeriodEnd = sub.CurrentPeriodEnd, sub.CurrentPeriodEnd.Add(length)
	}
}

// save writes the state to a new file and renames it over the old one, so
// that the file is always whole.
func (f *fakeStripe) save() error {
	f.saveMu.Lock()
	defer f.saveMu.Unlock()
	data, err := json.MarshalIndent(f.fake.State(), "", "  ")
	if err != nil {
		return fmt.Errorf("save the Stripe fake's state: %w", err)
	}
	tmp := f.statePath + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("save the Stripe fake's state: %w", err)
	}
	if err := os.Rename(tmp, f.statePath); err != nil {
		return fmt.Errorf("save the Stripe fake's state: %w", err)
	}
	return nil
}

// knows reports whether the fake holds the subscription.
func (f *fakeStripe) knows(subscriptionID string) bool {
	_, ok := f.fake.Subscription(subscriptionID)
	return ok
}

// backdated runs fn with the fake's clock set back by age, so that what fn
// creates at the fake starts that long ago.
func (f *fakeStripe) backdated(age time.Duration, fn func() error) error {
	f.fake.SetClock(func() time.Time { return time.Now().Add(-age) })
	defer f.fake.SetClock(time.Now)
	return fn()
}
