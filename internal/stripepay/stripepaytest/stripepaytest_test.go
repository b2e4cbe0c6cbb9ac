package stripepaytest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

const (
	priceFree  = "price_free"
	pricePro   = "price_pro"
	priceScale = "price_scale"
)

// start is the fake's clock: subscriptions run from start for 30 days, and
// changes are made at mid-period, so prorations are half the difference.
var (
	start   = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	midTerm = start.Add(15 * 24 * time.Hour)
)

type env struct {
	fake *stripepaytest.Server
	url  string
	p    *stripepay.Provider
	org  billing.CreatedCustomer
}

// newEnv starts a fake with three prices and an org on Pro, created through
// stripepay.
func newEnv(t *testing.T, cfg stripepay.Config) env {
	t.Helper()
	fake := stripepaytest.New()
	fake.SetClock(func() time.Time { return start })
	fake.SetPrice(priceFree, 0, "usd")
	fake.SetPrice(pricePro, 1900, "usd")
	fake.SetPrice(priceScale, 4900, "usd")
	srv := httptest.NewServer(fake.Handler())
	t.Cleanup(srv.Close)
	cfg.SecretKey, cfg.APIBase = "sk_test_fake", srv.URL
	p := stripepay.New(cfg)
	org, err := p.CreateCustomer(context.Background(), billing.NewCustomer{
		OrgID: "org_1", Name: "Vector Build", Email: "ops@vector.example", PriceID: pricePro,
	}, "org_1")
	if err != nil {
		t.Fatalf("create customer: %v", err)
	}
	return env{fake: fake, url: srv.URL, p: p, org: org}
}

func (e env) change(price string) billing.PlanChange {
	return billing.PlanChange{
		CustomerID: e.org.CustomerID, SubscriptionID: e.org.SubscriptionID, ItemID: e.org.ItemID,
		NewPriceID: price, ProrationDate: midTerm, ChargeNow: true,
	}
}

// price is the subscription's current price in the fake.
func (e env) price(t *testing.T) string {
	t.Helper()
	sub, ok := e.fake.Subscription(e.org.SubscriptionID)
	if !ok || len(sub.Items) != 1 {
		t.Fatalf("subscription %s: %+v, %v", e.org.SubscriptionID, sub, ok)
	}
	return sub.Items[0].PriceID
}

func (e env) wantUpdates(t *testing.T, want int) {
	t.Helper()
	if got := e.fake.UpdateCount(e.org.SubscriptionID); got != want {
		t.Errorf("UpdateCount = %d, want %d", got, want)
	}
}

// stripeAPI is a plain stripe-go client on the fake, to show that its JSON
// decodes into stripe-go's types.
func (e env) stripeAPI() *client.API {
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(e.url), MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return client.New("sk_test_fake", &stripe.Backends{API: backend})
}

// post sends a form-encoded request as stripe-go would.
func (e env) post(t *testing.T, path, key string, form url.Values) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_test_fake")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func (e env) swapForm(price string) url.Values {
	return url.Values{"items[0][id]": {e.org.ItemID}, "items[0][price]": {price},
		"proration_behavior": {"always_invoice"}, "payment_behavior": {"error_if_incomplete"}}
}

func errorType(t *testing.T, body []byte) string {
	t.Helper()
	var v struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	return v.Error.Type
}

// eventually polls cond for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReplayChangesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	first, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, first) {
		t.Errorf("replay %+v, want the first answer %+v", again, first)
	}
	e.wantUpdates(t, 1)
	if p := e.price(t); p != priceScale {
		t.Errorf("price %s, want %s", p, priceScale)
	}
}

func TestReplayHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	path := "/v1/subscriptions/" + e.org.SubscriptionID
	r1, b1 := e.post(t, path, "k1", e.swapForm(priceScale))
	r2, b2 := e.post(t, path, "k1", e.swapForm(priceScale))
	if r1.StatusCode != 200 || r2.StatusCode != 200 {
		t.Fatalf("status %d then %d, want 200 twice", r1.StatusCode, r2.StatusCode)
	}
	if r1.Header.Get("Idempotent-Replayed") != "" || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("Idempotent-Replayed %q then %q, want \"\" then true",
			r1.Header.Get("Idempotent-Replayed"), r2.Header.Get("Idempotent-Replayed"))
	}
	if orig := r2.Header.Get("Original-Request"); orig == "" || orig != r1.Header.Get("Request-Id") {
		t.Errorf("Original-Request %q, want the first Request-Id %q", orig, r1.Header.Get("Request-Id"))
	}
	if string(b1) != string(b2) {
		t.Errorf("replayed body differs:\n%s\n%s", b1, b2)
	}
	e.wantUpdates(t, 1)
}

// TestLostResponseThenRetry: the change is made but its answer never arrives;
// the retry with the same key gets the saved answer and changes nothing.
func TestLostResponseThenRetry(t *testing.T) {
	t.Parallel()
	noKeepAlive := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	tests := []struct {
		name  string
		fault stripepaytest.Fault
		cfg   stripepay.Config
	}{
		{"500 instead of the answer", stripepaytest.LoseResponse, stripepay.Config{}},
		// Without keep-alives: Go's Transport would otherwise resend the
		// request itself on a reused connection (it carries an
		// Idempotency-Key) and hide the loss.
		{"connection closed", stripepaytest.DropConnection, stripepay.Config{HTTPClient: noKeepAlive}},
		{"client timeout", stripepaytest.Delay(10 * time.Second), stripepay.Config{Timeout: 100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tt.cfg)
			e.fake.FailNext(tt.fault)
			_, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_1")
			if !errors.Is(err, billing.ErrUnavailable) {
				t.Fatalf("first call: %v, want ErrUnavailable", err)
			}
			// The change was made, whatever the client saw.
			eventually(t, "the change and its saved answer", func() bool {
				return e.fake.UpdateCount(e.org.SubscriptionID) == 1 && e.fake.InFlight() == 0
			})
			got, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_1")
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			want := billing.AppliedChange{Status: "active", CurrentPeriodEnd: start.Add(30 * 24 * time.Hour), ItemID: e.org.ItemID, Quantity: 1}
			got.Invoice = nil // the invoice is TestFakeApplyThenDowngradePreview's to check
			if got != want {
				t.Errorf("retry got %+v, want %+v", got, want)
			}
			e.wantUpdates(t, 1)
			if p := e.price(t); p != priceScale {
				t.Errorf("price %s, want %s", p, priceScale)
			}
		})
	}
}

func TestSameKeyOtherRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_1"); err != nil {
		t.Fatal(err)
	}
	_, err := e.p.ApplyPlanChange(context.Background(), e.change(pricePro), "conf_1")
	if !errors.Is(err, billing.ErrProviderRejected) {
		t.Fatalf("other body, same key: %v, want ErrProviderRejected", err)
	}
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != 400 || se.Type != stripe.ErrorTypeIdempotency {
		t.Errorf("got %+v, want 400 idempotency_error", se)
	}
	e.wantUpdates(t, 1)
	if p := e.price(t); p != priceScale {
		t.Errorf("price %s, want %s (unchanged by the refused request)", p, priceScale)
	}

	// The same key on another endpoint is refused the same way.
	resp, body := e.post(t, "/v1/customers", "conf_1", url.Values{"name": {"x"}})
	if resp.StatusCode != 400 || errorType(t, body) != "idempotency_error" {
		t.Errorf("other path: %d %s, want 400 idempotency_error", resp.StatusCode, body)
	}
}

func TestConcurrentSameKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	e.fake.FailNext(stripepaytest.Stall(time.Minute)) // held until its client gives up
	ctx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	firstErr := make(chan error, 1)
	go func() {
		_, err := e.p.ApplyPlanChange(ctx, e.change(priceScale), "conf_1")
		firstErr <- err
	}()
	eventually(t, "the first request in flight", func() bool { return e.fake.InFlight() == 1 })

	_, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_1")
	var se *stripe.Error
	if !errors.Is(err, billing.ErrUnavailable) || !errors.As(err, &se) || se.HTTPStatusCode != 409 {
		t.Fatalf("concurrent call: %v, want 409 classified ErrUnavailable", err)
	}
	e.wantUpdates(t, 0)

	giveUp()
	if err := <-firstErr; !errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("abandoned call: %v, want ErrUnavailable", err)
	}
	eventually(t, "the first request to finish", func() bool { return e.fake.InFlight() == 0 })
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_1"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	e.wantUpdates(t, 1)
}

// TestRefusalsAreReplayed: like Stripe, a refusal from the endpoint is saved
// under its key, a 500 included; only a new key tries again.
func TestRefusalsAreReplayed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault stripepaytest.Fault
		want  error
	}{
		{stripepaytest.DeclineCard, billing.ErrPaymentDeclined},
		{stripepaytest.ServerError, billing.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.want.Error(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, stripepay.Config{})
			e.fake.FailNext(tt.fault)
			for range 2 {
				_, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_1")
				if !errors.Is(err, tt.want) {
					t.Fatalf("got %v, want %v", err, tt.want)
				}
			}
			e.wantUpdates(t, 0)
			if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "conf_2"); err != nil {
				t.Fatalf("new key: %v", err)
			}
			e.wantUpdates(t, 1)
		})
	}
}

// TestInvalidParamsNotSaved: a request refused for its parameters never
// started executing, so the key stays free for a corrected request.
func TestInvalidParamsNotSaved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	path := "/v1/subscriptions/" + e.org.SubscriptionID
	bad := e.swapForm(priceScale)
	bad.Set("proration_behavior", "sometimes")
	if resp, body := e.post(t, path, "k1", bad); resp.StatusCode != 400 || errorType(t, body) != "invalid_request_error" {
		t.Fatalf("bad params: %d %s, want 400 invalid_request_error", resp.StatusCode, body)
	}
	if resp, body := e.post(t, path, "k1", e.swapForm(priceScale)); resp.StatusCode != 200 {
		t.Fatalf("corrected request: %d %s, want 200", resp.StatusCode, body)
	}
	e.wantUpdates(t, 1)
}

func TestFailNextAt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	e.fake.FailNextAt(stripepaytest.CreatePreview, stripepaytest.ServerError)
	change := e.change(priceScale)
	if _, err := e.p.PreviewPlanChange(context.Background(), change); !errors.Is(err, billing.ErrUnavailable) {
		t.Fatalf("faulty preview: %v, want ErrUnavailable", err)
	}
	if _, err := e.p.PreviewPlanChange(context.Background(), change); err != nil {
		t.Fatalf("next preview: %v", err)
	}
	if _, err := e.p.ApplyPlanChange(context.Background(), change, "conf_1"); err != nil {
		t.Fatalf("the fault was for previews only: %v", err)
	}
}

func TestPreviewArithmetic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	api := e.stripeAPI()
	type line struct {
		amount    int64
		proration bool
	}
	tests := []struct {
		name      string
		price     string
		behavior  string
		at        time.Time
		wantDue   int64
		wantLines []line
	}{
		// (4900 − 1900) × 15/30 = 1500.
		{"upgrade now", priceScale, "always_invoice", midTerm, 1500, []line{{1500, true}}},
		// Credit −1900 × 15/30, charge the rest of 1500; next period 4900.
		{"upgrade later", priceScale, "create_prorations", midTerm, 6400, []line{{-950, true}, {2450, true}, {4900, false}}},
		// Nothing to prorate, nothing due.
		{"same price", pricePro, "always_invoice", midTerm, 0, nil},
		// A downgrade invoiced now is a credit of 950: nothing is due.
		{"downgrade now", priceFree, "always_invoice", midTerm, 0, []line{{-950, true}}},
		// 10 of 30 days left: (4900 − 1900) / 3 = 1000.
		{"later in the period", priceScale, "always_invoice", start.Add(20 * 24 * time.Hour), 1000, []line{{1000, true}}},
		{"no proration", priceScale, "none", midTerm, 4900, []line{{4900, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := &stripe.InvoiceCreatePreviewParams{
				Subscription: stripe.String(e.org.SubscriptionID),
				SubscriptionDetails: &stripe.InvoiceCreatePreviewSubscriptionDetailsParams{
					Items: []*stripe.InvoiceCreatePreviewSubscriptionDetailsItemParams{{
						ID: stripe.String(e.org.ItemID), Price: stripe.String(tt.price),
					}},
					ProrationBehavior: stripe.String(tt.behavior),
					ProrationDate:     stripe.Int64(tt.at.Unix()),
				},
			}
			inv, err := api.Invoices.CreatePreview(params)
			if err != nil {
				t.Fatal(err)
			}
			var got []line
			for _, l := range inv.Lines.Data {
				got = append(got, line{l.Amount, l.Proration})
			}
			if inv.AmountDue != tt.wantDue || inv.Currency != "usd" || !slices.Equal(got, tt.wantLines) {
				t.Errorf("amount_due %d %s, lines %v; want %d usd, %v", inv.AmountDue, inv.Currency, got, tt.wantDue, tt.wantLines)
			}
		})
	}
}

func TestDowngradeNowIsNotDue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	if _, err := e.p.ApplyPlanChange(context.Background(), e.change(priceScale), "up"); err != nil {
		t.Fatal(err)
	}
	got, err := e.p.PreviewPlanChange(context.Background(), e.change(pricePro))
	if err != nil {
		t.Fatal(err)
	}
	if want := (billing.Preview{AmountDueNowCents: 0, ProrationCents: -1500, Currency: "usd"}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestSubscriptionDecodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	sub, err := e.stripeAPI().Subscriptions.Get(e.org.SubscriptionID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sub.ID != e.org.SubscriptionID || sub.Object != "subscription" || sub.Status != stripe.SubscriptionStatusActive ||
		sub.Customer == nil || sub.Customer.ID != e.org.CustomerID || sub.Metadata["org_id"] != "org_1" ||
		sub.CurrentPeriodStart != start.Unix() || sub.CurrentPeriodEnd != start.Add(30*24*time.Hour).Unix() {
		t.Errorf("subscription %+v", sub)
	}
	if sub.Items == nil || len(sub.Items.Data) != 1 {
		t.Fatalf("items %+v", sub.Items)
	}
	it := sub.Items.Data[0]
	if it.ID != e.org.ItemID || it.Quantity != 1 || it.Price == nil ||
		it.Price.ID != pricePro || it.Price.UnitAmount != 1900 || it.Price.Currency != "usd" {
		t.Errorf("item %+v, price %+v", it, it.Price)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stripepay.Config{})
	api := e.stripeAPI()

	_, err := api.Subscriptions.Get("sub_nope", nil)
	wantStripeError(t, err, 404, stripe.ErrorCodeResourceMissing)

	params := &stripe.SubscriptionParams{Customer: stripe.String(e.org.CustomerID),
		Items: []*stripe.SubscriptionItemsParams{{Price: stripe.String("price_nope")}}}
	_, err = api.Subscriptions.New(params)
	wantStripeError(t, err, 400, stripe.ErrorCodeResourceMissing)

	out := e.change(priceScale)
	out.ProrationDate = start.Add(31 * 24 * time.Hour)
	_, err = e.p.ApplyPlanChange(context.Background(), out, "late")
	if !errors.Is(err, billing.ErrProviderRejected) {
		t.Errorf("proration date after the period: %v, want ErrProviderRejected", err)
	}

	req, _ := http.NewRequest(http.MethodGet, e.url+"/v1/subscriptions/"+e.org.SubscriptionID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("no API key: %d, want 401", resp.StatusCode)
	}

	if resp, body := e.post(t, "/v1/charges", "", nil); resp.StatusCode != 404 || errorType(t, body) != "invalid_request_error" {
		t.Errorf("unknown endpoint: %d %s, want 404 invalid_request_error", resp.StatusCode, body)
	}
}

func wantStripeError(t *testing.T, err error, status int, code stripe.ErrorCode) {
	t.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != status || se.Code != code {
		t.Errorf("got %v, want %d %s", err, status, code)
	}
}
