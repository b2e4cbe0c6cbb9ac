package stripepay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
	"github.com/billingd/billingd/internal/testenv"
)

// sentinels are the three outcomes a provider error can wrap; each error
// must wrap exactly one of them.
var sentinels = []error{billing.ErrPaymentDeclined, billing.ErrProviderRejected, billing.ErrUnavailable}

func assertKind(t *testing.T, err, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	for _, s := range sentinels {
		if got := errors.Is(err, s); got != (s == want) {
			t.Errorf("errors.Is(%q, %v) = %v, want %v", err, s, got, !got)
		}
	}
}

func TestClassify(t *testing.T) {
	stripeErr := func(status int, typ stripe.ErrorType, code stripe.ErrorCode) *stripe.Error {
		return &stripe.Error{HTTPStatusCode: status, Type: typ, Code: code,
			Msg: "No such price: 'price_SECRET'", RequestID: "req_123"}
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"card declined", stripeErr(402, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined), billing.ErrPaymentDeclined},
		{"card error without 402", stripeErr(400, stripe.ErrorTypeCard, ""), billing.ErrPaymentDeclined},
		{"402 of another type", stripeErr(402, stripe.ErrorTypeInvalidRequest, ""), billing.ErrPaymentDeclined},
		{"500", stripeErr(500, stripe.ErrorTypeAPI, ""), billing.ErrUnavailable},
		{"503", stripeErr(503, stripe.ErrorTypeAPI, ""), billing.ErrUnavailable},
		{"409 key in use", stripeErr(409, stripe.ErrorTypeIdempotency, "idempotency_key_in_use"), billing.ErrUnavailable},
		{"429 rate limit", stripeErr(429, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeRateLimit), billing.ErrUnavailable},
		{"408", stripeErr(408, stripe.ErrorTypeAPI, ""), billing.ErrUnavailable},
		{"400 invalid request", stripeErr(400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing), billing.ErrProviderRejected},
		{"400 key reused", stripeErr(400, stripe.ErrorTypeIdempotency, ""), billing.ErrProviderRejected},
		{"401 bad key", stripeErr(401, stripe.ErrorTypeInvalidRequest, ""), billing.ErrProviderRejected},
		{"404", stripeErr(404, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing), billing.ErrProviderRejected},
		{"no status", stripeErr(0, stripe.ErrorTypeAPI, ""), billing.ErrUnavailable},
		{"deadline", context.DeadlineExceeded, billing.ErrUnavailable},
		{"cancelled", context.Canceled, billing.ErrUnavailable},
		{"EOF", &url.Error{Op: "Post", URL: "https://api.stripe.com/v1/subscriptions/sub_1", Err: io.EOF}, billing.ErrUnavailable},
		{"reset", &url.Error{Op: "Post", URL: "https://api.stripe.com/v1/subscriptions/sub_1",
			Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, billing.ErrUnavailable},
		{"unreadable body", errors.New("Couldn't deserialize JSON (response status: 502, body sample: '<html>')"), billing.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify("update subscription", tt.err)
			assertKind(t, err, tt.want)
			if !errors.Is(err, tt.err) {
				t.Errorf("the cause is not in the chain of %q", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "stripe update subscription: ") {
				t.Errorf("message %q does not say what was being done", msg)
			}
			if strings.Contains(msg, "SECRET") || strings.Contains(msg, "{") {
				t.Errorf("message %q carries Stripe's message or JSON", msg)
			}
		})
	}
}

func TestClassifyMessage(t *testing.T) {
	err := classify("update subscription", &stripe.Error{HTTPStatusCode: 402, Type: stripe.ErrorTypeCard,
		Code: stripe.ErrorCodeCardDeclined, DeclineCode: "insufficient_funds", RequestID: "req_9"})
	want := "stripe update subscription: status 402 type card_error code card_declined decline_code insufficient_funds request req_9: payment declined"
	if err.Error() != want {
		t.Errorf("got  %q\nwant %q", err, want)
	}
	var se *stripe.Error
	if !errors.As(err, &se) || se.RequestID != "req_9" {
		t.Errorf("errors.As(*stripe.Error) = %v, %v", se, err)
	}

	long := errors.New(strings.Repeat("x", 1000))
	if got := classify("preview invoice", long).Error(); len(got) > 300 {
		t.Errorf("message of %d bytes, want it truncated", len(got))
	}
}

func TestPreviewFromInvoice(t *testing.T) {
	line := func(amount int64, proration bool) *stripe.InvoiceLineItem {
		return &stripe.InvoiceLineItem{Amount: amount, Proration: proration}
	}
	invoice := func(due, subtotal int64, hasMore bool, lines ...*stripe.InvoiceLineItem) *stripe.Invoice {
		inv := &stripe.Invoice{AmountDue: due, Subtotal: subtotal, Total: subtotal, Currency: "usd",
			Lines: &stripe.InvoiceLineItemList{Data: lines, ListMeta: stripe.ListMeta{HasMore: hasMore}}}
		if due < subtotal {
			inv.StartingBalance = due - subtotal // credit the customer held
		}
		return inv
	}
	// Stripe's parts of an amount: a 20% coupon and 10% exclusive tax on a
	// $15.00 proration (tax after the discount), with $5.00 of credit.
	parts := &stripe.Invoice{Subtotal: 1500, Total: 1320, AmountDue: 820, StartingBalance: -500, Currency: "usd",
		TotalDiscountAmounts: []*stripe.InvoiceTotalDiscountAmount{{Amount: 300}},
		TotalTaxAmounts:      []*stripe.InvoiceTotalTaxAmount{{Amount: 120}, {Amount: 99, Inclusive: true}},
		Lines:                &stripe.InvoiceLineItemList{Data: []*stripe.InvoiceLineItem{line(1500, true)}}}
	tests := []struct {
		name      string
		inv       *stripe.Invoice
		chargeNow bool
		want      billing.Preview
		wantErr   bool
	}{
		{"upgrade charged now", invoice(1500, 1500, false, line(-950, true), line(2450, true)), true,
			billing.Preview{AmountDueNowCents: 1500, ProrationCents: 1500, Currency: "usd", SubtotalCents: 1500}, false},
		{"upgrade net of customer credit", invoice(0, 1500, false, line(1500, true)), true,
			billing.Preview{AmountDueNowCents: 0, ProrationCents: 1500, Currency: "usd", SubtotalCents: 1500, CreditAppliedCents: 1500}, false},
		{"every part", parts, true,
			billing.Preview{AmountDueNowCents: 820, ProrationCents: 1500, Currency: "usd",
				SubtotalCents: 1500, DiscountCents: 300, TaxCents: 120, CreditAppliedCents: 500}, false},
		{"downgrade leaves out the next period", invoice(400, 400, false, line(-2450, true), line(950, true), line(1900, false)), false,
			billing.Preview{AmountDueNowCents: 0, ProrationCents: -1500, Currency: "usd"}, false},
		{"no proration lines", invoice(1900, 1900, false, line(1900, false)), false,
			billing.Preview{Currency: "usd"}, false},
		{"incomplete lines, charged now: subtotal", invoice(1500, 1500, true, line(700, true)), true,
			billing.Preview{AmountDueNowCents: 1500, ProrationCents: 1500, Currency: "usd", SubtotalCents: 1500}, false},
		{"incomplete lines, next invoice: refuse", invoice(400, 400, true, line(-2450, true)), false,
			billing.Preview{}, true},
		{"no lines object, next invoice: refuse", &stripe.Invoice{AmountDue: 400, Currency: "usd"}, false,
			billing.Preview{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := previewFromInvoice(tt.inv, tt.chargeNow)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestIdempotencyKeyChecked(t *testing.T) {
	t.Parallel()
	env := newFakeEnv(t, Config{})
	for _, key := range []string{"", strings.Repeat("k", 256)} {
		_, err := env.p.ApplyPlanChange(context.Background(), env.change(priceScale, true), key)
		if err == nil {
			t.Fatalf("key of %d bytes accepted", len(key))
		}
		for _, s := range sentinels {
			if errors.Is(err, s) {
				t.Errorf("key of %d bytes: %v wraps %v, want a plain (internal) error", len(key), err, s)
			}
		}
	}
	if n := env.fake.UpdateCount(env.cust.SubscriptionID); n != 0 {
		t.Errorf("UpdateCount = %d, want 0: nothing may be sent", n)
	}
}

// TestHTTPClientSetsNoTimeout: the client billingd makes has no
// http.Client.Timeout (behind sizedBody it would start a goroutine and a
// timer per request: every call is bounded by its context instead, see
// TestStripeCallsEndAtTheTimeout), and a caller's client keeps its own and
// is never modified.
func TestHTTPClientSetsNoTimeout(t *testing.T) {
	mine := &http.Client{}
	if c := httpClient(Config{HTTPClient: mine, Timeout: time.Second}); c.Timeout != 0 || mine.Timeout != 0 || c == mine {
		t.Errorf("timeout %v on the client used, %v on the caller's; want 0 and untouched 0", c.Timeout, mine.Timeout)
	}
	if c := httpClient(Config{Timeout: time.Second}); c.Timeout != 0 {
		t.Errorf("timeout %v on billingd's own client, want 0 (the context bounds each call)", c.Timeout)
	}
	own := &http.Client{Timeout: 3 * time.Second}
	if c := httpClient(Config{HTTPClient: own}); c.Timeout != own.Timeout || c == own {
		t.Errorf("a client with its own timeout: %v on the copy used, want %v", c.Timeout, own.Timeout)
	}
}

// TestStripeCallsEndAtTheTimeout: a preview, a read, an update, an invoice
// list, a cancellation, a schedule, a schedule's release and the read after
// it, each held at Stripe for 10 s, end unavailable at Config.Timeout.
func TestStripeCallsEndAtTheTimeout(t *testing.T) {
	t.Parallel()
	// Keeping the plan releases the schedule, then reads the subscription
	// back: two requests bounded by hand, not by request.
	keep := func(t *testing.T, e fakeEnv) func() error {
		e.scheduleStarter(t)
		return e.apply(e.keep("cfm_2", e.read(t).Schedule), "conf_2:keep")
	}
	// Each case readies its env (unbounded setup requests) and returns the
	// call to hold at the endpoint. causeAsText: the error keeps its cause
	// as text only (afterRelease: whatever went wrong after a release, its
	// kind is unknown).
	calls := []struct {
		name        string
		endpoint    stripepaytest.Endpoint
		ready       func(*testing.T, fakeEnv) func() error
		causeAsText bool
	}{
		{"preview", stripepaytest.CreatePreview, func(_ *testing.T, e fakeEnv) func() error {
			return func() error {
				_, err := e.p.PreviewPlanChange(context.Background(), e.change(priceScale, true))
				return err
			}
		}, false},
		{"read", stripepaytest.GetSubscription, func(_ *testing.T, e fakeEnv) func() error {
			return func() error {
				_, err := e.p.ReadSubscription(context.Background(), e.cust.SubscriptionID)
				return err
			}
		}, false},
		{"update", stripepaytest.UpdateSubscription, func(_ *testing.T, e fakeEnv) func() error {
			return e.apply(e.change(priceScale, true), "conf_1:apply")
		}, false},
		{"invoices", stripepaytest.ListInvoices, func(_ *testing.T, e fakeEnv) func() error {
			return func() error {
				_, err := e.p.SubscriptionInvoices(context.Background(), e.cust.SubscriptionID, periodStart)
				return err
			}
		}, false},
		{"cancel", stripepaytest.CancelSubscription, func(_ *testing.T, e fakeEnv) func() error {
			change := e.change(pricePro, false)
			change.Cancellation = billing.CancelNow
			return e.apply(change, "conf_1:cancel")
		}, false},
		{"schedule", stripepaytest.CreateSchedule, func(_ *testing.T, e fakeEnv) func() error {
			return e.apply(e.atPeriodEnd(priceScale, "cfm_1"), "conf_1:schedule")
		}, false},
		{"release", stripepaytest.ReleaseSchedule, keep, false},
		{"read after release", stripepaytest.GetSubscription, keep, true},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// 1 s: the setup's own requests (a customer, its subscription)
			// must not meet it on a loaded machine; 10 s held must.
			env := newFakeEnv(t, Config{Timeout: time.Second})
			env.fake.SetPrice(priceStarter, 900, "usd")
			send := c.ready(t, env)
			env.fake.FailNextAt(c.endpoint, stripepaytest.Delay(10*time.Second))
			err := send()
			assertKind(t, err, billing.ErrUnavailable)
			ended := errors.Is(err, context.DeadlineExceeded)
			if c.causeAsText {
				ended = strings.Contains(fmt.Sprint(err), context.DeadlineExceeded.Error())
			}
			if !ended {
				t.Errorf("%v: not ended by the timeout", err)
			}
		})
	}
}

// apply returns ApplyPlanChange of change under key, its result dropped.
func (e fakeEnv) apply(change billing.PlanChange, key string) func() error {
	return func() error {
		_, err := e.p.ApplyPlanChange(context.Background(), change, key)
		return err
	}
}

// TestWrapTransport: tracing's wrapper sees every request, whichever client
// the provider was given, and the caller's client keeps its transport.
func TestWrapTransport(t *testing.T) {
	var wrapped []http.RoundTripper
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		wrapped = append(wrapped, rt)
		return roundTripFunc(func(r *http.Request) (*http.Response, error) { return rt.RoundTrip(r) })
	}
	own := &http.Client{Timeout: 3 * time.Second}
	for _, cfg := range []Config{{WrapTransport: wrap}, {WrapTransport: wrap, HTTPClient: own}} {
		c := httpClient(cfg)
		sized, ok := c.Transport.(sizedBody)
		if _, wrappedByCfg := sized.next.(roundTripFunc); !ok || !wrappedByCfg {
			t.Errorf("client given %v: transport %T (%T) not sized over the wrapper", cfg.HTTPClient, c.Transport, sized.next)
		}
	}
	if own.Transport != nil || len(wrapped) != 2 || wrapped[1] != http.DefaultTransport {
		t.Errorf("the caller's client changed (%T) or the wrapper did not get its transport (%v)", own.Transport, wrapped)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Against stripe-mock: the requests are valid for Stripe's API spec and the
// responses map into the billing types. stripe-mock answers with fixtures,
// so only shapes are checked, not amounts.

func TestStripeMockPreview(t *testing.T) {
	t.Parallel()
	p := New(Config{SecretKey: "sk_test_123", APIBase: testenv.StripeMock(t)})
	for _, chargeNow := range []bool{true, false} {
		t.Run(fmt.Sprintf("chargeNow=%v", chargeNow), func(t *testing.T) {
			got, err := p.PreviewPlanChange(context.Background(), mockChange(chargeNow))
			if err != nil {
				t.Fatal(err)
			}
			if got.Currency != "usd" {
				t.Errorf("currency %q, want usd", got.Currency)
			}
			if chargeNow && got.AmountDueNowCents <= 0 {
				t.Errorf("amount due now %d, want the fixture's positive amount_due", got.AmountDueNowCents)
			}
			if !chargeNow && got.AmountDueNowCents != 0 {
				t.Errorf("amount due now %d, want 0 when not charging now", got.AmountDueNowCents)
			}
		})
	}
}

func TestStripeMockApply(t *testing.T) {
	t.Parallel()
	p := New(Config{SecretKey: "sk_test_123", APIBase: testenv.StripeMock(t)})
	for _, chargeNow := range []bool{true, false} {
		t.Run(fmt.Sprintf("chargeNow=%v", chargeNow), func(t *testing.T) {
			got, err := p.ApplyPlanChange(context.Background(), mockChange(chargeNow), "conf_123:apply")
			if err != nil {
				t.Fatal(err)
			}
			if got.Status == "" || got.ItemID == "" || got.CurrentPeriodEnd.IsZero() {
				t.Errorf("got %+v, want status, item id and period end", got)
			}
		})
	}
}

func TestStripeMockCreateCustomer(t *testing.T) {
	t.Parallel()
	p := New(Config{SecretKey: "sk_test_123", APIBase: testenv.StripeMock(t)})
	got, err := p.CreateCustomer(context.Background(), billing.NewCustomer{
		OrgID: "org_1", Name: "Vector Build", Email: "ops@vector.example", PriceID: "price_123",
	}, "org:org_1")
	if err != nil {
		t.Fatal(err)
	}
	for field, id := range map[string]string{"cus_": got.CustomerID, "sub_": got.SubscriptionID, "si_": got.ItemID} {
		if !strings.HasPrefix(id, field) {
			t.Errorf("id %q, want prefix %s", id, field)
		}
	}
	if got.Status == "" || got.CurrentPeriodEnd.IsZero() {
		t.Errorf("got %+v, want status and period end", got)
	}
}

func TestStripeMockRejects(t *testing.T) {
	t.Parallel()
	p := New(Config{SecretKey: "sk_test_123", APIBase: testenv.StripeMock(t)})
	// A subscription id with a slash matches none of stripe-mock's routes:
	// a genuine 404 invalid_request_error.
	change := mockChange(true)
	change.SubscriptionID = "sub_1/nope"
	_, err := p.ApplyPlanChange(context.Background(), change, "conf_123:apply")
	assertKind(t, err, billing.ErrProviderRejected)
}

func mockChange(chargeNow bool) billing.PlanChange {
	return billing.PlanChange{
		CustomerID: "cus_123", SubscriptionID: "sub_123", ItemID: "si_123", NewPriceID: "price_123",
		ProrationDate: time.Now().Truncate(time.Second), ChargeNow: chargeNow,
	}
}

// Against stripepaytest (the Stripe fake): real arithmetic and the failures stripe-mock cannot
// produce.

const (
	pricePro   = "price_billingd_pro"
	priceScale = "price_billingd_scale"
)

// periodStart is the fake's clock; with 15 of 30 days left every proration
// is half the price difference.
var periodStart = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)

type fakeEnv struct {
	fake *stripepaytest.Server
	p    *Provider
	cust billing.CreatedCustomer
}

// newFakeEnv starts a fake with the Pro and Scale prices and an org on Pro,
// created through the provider.
func newFakeEnv(t *testing.T, cfg Config) fakeEnv {
	t.Helper()
	return newFakeEnvBehind(t, cfg, func(h http.Handler) http.Handler { return h })
}

// newFakeEnvBehind is newFakeEnv with the fake's handler wrapped by front,
// which sees every request as Stripe would.
func newFakeEnvBehind(t *testing.T, cfg Config, front func(http.Handler) http.Handler) fakeEnv {
	t.Helper()
	fake := stripepaytest.New()
	fake.SetClock(func() time.Time { return periodStart })
	fake.SetPrice(pricePro, 1900, "usd")
	fake.SetPrice(priceScale, 4900, "usd")
	srv := httptest.NewServer(front(fake.Handler()))
	t.Cleanup(srv.Close)
	cfg.SecretKey, cfg.APIBase = "sk_test_fake", srv.URL
	p := New(cfg)
	cust, err := p.CreateCustomer(context.Background(), billing.NewCustomer{
		OrgID: "org_1", Name: "Vector Build", Email: "ops@vector.example", PriceID: pricePro,
	}, "org:org_1")
	if err != nil {
		t.Fatalf("create customer: %v", err)
	}
	return fakeEnv{fake: fake, p: p, cust: cust}
}

func (e fakeEnv) change(price string, chargeNow bool) billing.PlanChange {
	return billing.PlanChange{
		CustomerID: e.cust.CustomerID, SubscriptionID: e.cust.SubscriptionID, ItemID: e.cust.ItemID,
		NewPriceID: price, ProrationDate: periodStart.Add(15 * 24 * time.Hour), ChargeNow: chargeNow,
	}
}

func TestFakeCreateCustomer(t *testing.T) {
	t.Parallel()
	env := newFakeEnv(t, Config{})
	sub, ok := env.fake.Subscription(env.cust.SubscriptionID)
	if !ok {
		t.Fatalf("subscription %s not in the fake", env.cust.SubscriptionID)
	}
	if sub.Customer != env.cust.CustomerID || sub.Metadata["org_id"] != "org_1" ||
		len(sub.Items) != 1 || sub.Items[0].ID != env.cust.ItemID || sub.Items[0].PriceID != pricePro {
		t.Errorf("fake holds %+v for %+v", sub, env.cust)
	}
	if env.cust.Status != "active" || !env.cust.CurrentPeriodEnd.Equal(periodStart.Add(30*24*time.Hour)) {
		t.Errorf("got %+v, want active until %v", env.cust, periodStart.Add(30*24*time.Hour))
	}
}

func TestFakePreview(t *testing.T) {
	t.Parallel()
	env := newFakeEnv(t, Config{})
	tests := []struct {
		name      string
		price     string
		chargeNow bool
		want      billing.Preview
	}{
		// (4900 − 1900) × 15/30 = 1500, charged at once.
		{"upgrade", priceScale, true, billing.Preview{AmountDueNowCents: 1500, ProrationCents: 1500, Currency: "usd", SubtotalCents: 1500}},
		// Pro → Pro: nothing prorated.
		{"same price", pricePro, true, billing.Preview{Currency: "usd"}},
		// Pro → Scale without charging now: carried to the next invoice.
		{"prorate later", priceScale, false, billing.Preview{ProrationCents: 1500, Currency: "usd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := env.p.PreviewPlanChange(context.Background(), env.change(tt.price, tt.chargeNow))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFakeApplyThenDowngradePreview(t *testing.T) {
	t.Parallel()
	env := newFakeEnv(t, Config{})
	quoted, err := env.p.PreviewPlanChange(context.Background(), env.change(priceScale, true))
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.p.ApplyPlanChange(context.Background(), env.change(priceScale, true), "conf_1:apply")
	if err != nil {
		t.Fatal(err)
	}
	// The update's own invoice, read from its latest_invoice, charges what
	// the preview with the same proration date quoted.
	if got.Invoice == nil || got.Invoice.AmountDueCents != quoted.AmountDueNowCents || got.Invoice.Currency != "usd" {
		t.Fatalf("invoice %+v, want %d usd as quoted", got.Invoice, quoted.AmountDueNowCents)
	}
	got.Invoice = nil
	want := billing.AppliedChange{Status: "active", CurrentPeriodEnd: periodStart.Add(30 * 24 * time.Hour), ItemID: env.cust.ItemID, Quantity: 1}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// Back down to Pro: a credit of 1500 on the next invoice, nothing due now.
	preview, err := env.p.PreviewPlanChange(context.Background(), env.change(pricePro, false))
	if err != nil {
		t.Fatal(err)
	}
	if wantPreview := (billing.Preview{ProrationCents: -1500, Currency: "usd"}); preview != wantPreview {
		t.Errorf("downgrade preview %+v, want %+v", preview, wantPreview)
	}
}

// TestFakeApplyRecordsConfirmation: the executed confirmation is written to
// the subscription's metadata, and a retry under the same key (same
// metadata) is replayed rather than refused as a different request.
func TestFakeApplyRecordsConfirmation(t *testing.T) {
	t.Parallel()
	env := newFakeEnv(t, Config{})
	change := env.change(priceScale, true)
	change.ConfirmationID = "cfm_traced"
	for attempt := 1; attempt <= 2; attempt++ {
		if _, err := env.p.ApplyPlanChange(context.Background(), change, "billingd-cfm_traced"); err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
	}
	sub, _ := env.fake.Subscription(env.cust.SubscriptionID)
	if got := sub.Metadata[MetadataConfirmationID]; got != "cfm_traced" {
		t.Errorf("metadata %s = %q, want cfm_traced", MetadataConfirmationID, got)
	}
	if n := env.fake.UpdateCount(env.cust.SubscriptionID); n != 1 {
		t.Errorf("%d updates, want 1 (the retry is a replay)", n)
	}
}

// TestFakeErrors checks the classification end to end, through stripe-go's
// decoding of real HTTP answers.
func TestFakeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fault   *stripepaytest.Fault
		timeout time.Duration
		edit    func(*billing.PlanChange)
		want    error
	}{
		{name: "declined card", fault: ptr(stripepaytest.DeclineCard), want: billing.ErrPaymentDeclined},
		{name: "server error", fault: ptr(stripepaytest.ServerError), want: billing.ErrUnavailable},
		{name: "lost response", fault: ptr(stripepaytest.LoseResponse), want: billing.ErrUnavailable},
		{name: "timeout", fault: ptr(stripepaytest.Delay(10 * time.Second)), timeout: 100 * time.Millisecond, want: billing.ErrUnavailable},
		{name: "unknown price", edit: func(c *billing.PlanChange) { c.NewPriceID = "price_nope" }, want: billing.ErrProviderRejected},
		{name: "unknown subscription", edit: func(c *billing.PlanChange) { c.SubscriptionID = "sub_nope" }, want: billing.ErrProviderRejected},
		{name: "foreign item", edit: func(c *billing.PlanChange) { c.ItemID = "si_nope" }, want: billing.ErrProviderRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := newFakeEnv(t, Config{Timeout: tt.timeout})
			if tt.fault != nil {
				env.fake.FailNext(*tt.fault)
			}
			change := env.change(priceScale, true)
			if tt.edit != nil {
				tt.edit(&change)
			}
			_, err := env.p.ApplyPlanChange(context.Background(), change, "conf_1:apply")
			assertKind(t, err, tt.want)
		})
	}
}

func TestFakeContextCancelled(t *testing.T) {
	t.Parallel()
	env := newFakeEnv(t, Config{})
	env.fake.FailNext(stripepaytest.Delay(10 * time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := env.p.ApplyPlanChange(ctx, env.change(priceScale, true), "conf_1:apply")
	assertKind(t, err, billing.ErrUnavailable)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v: context.DeadlineExceeded not in the chain", err)
	}
}

func ptr[T any](v T) *T { return &v }
