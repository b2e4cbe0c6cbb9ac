package stripepay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
	"github.com/billingd/billingd/internal/testenv"
)

// answer is one response body Stripe (a stand-in) sent, and its path.
type answer struct {
	path string
	body []byte
}

// recorder keeps every response body that passes its transport.
type recorder struct {
	mu      sync.Mutex
	answers []answer
}

func (r *recorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		r.mu.Lock()
		r.answers = append(r.answers, answer{path: req.URL.Path, body: body})
		r.mu.Unlock()
		return resp, nil
	})
}

// invoiceView is everything billingd derives from an invoice.
type invoiceView struct {
	Now, Later       billing.Preview
	NowErr, LaterErr bool
	Invoice          *billing.Invoice
}

func viewInvoice(inv *stripe.Invoice) invoiceView {
	var v invoiceView
	var err error
	v.Now, err = previewFromInvoice(inv, true)
	v.NowErr = err != nil
	v.Later, err = previewFromInvoice(inv, false)
	v.LaterErr = err != nil
	v.Invoice = invoiceOf(inv)
	return v
}

// subscriptionView is everything billingd derives from a subscription.
type subscriptionView struct {
	ID, Status                 string
	PeriodEnd                  int64
	Confirmation               string
	LatestInvoice              *billing.Invoice
	ScheduleID, ScheduleStatus string
	Schedule                   *billing.ProviderSchedule
	Items                      int
	ItemsHasMore               bool
	ItemID, PriceID            string
	Quantity                   int64
	FirstItem                  string
	FirstItemOK                bool
}

func viewSubscription(sub *stripe.Subscription) subscriptionView {
	v := subscriptionView{ID: sub.ID, Status: string(sub.Status), PeriodEnd: sub.CurrentPeriodEnd,
		Confirmation: sub.Metadata[MetadataConfirmationID], LatestInvoice: invoiceOf(sub.LatestInvoice)}
	if sch := sub.Schedule; sch != nil {
		v.ScheduleID, v.ScheduleStatus = sch.ID, string(sch.Status)
		if sch.ID != "" {
			v.Schedule = scheduleOf(sch)
		}
	}
	if sub.Items != nil {
		v.Items, v.ItemsHasMore = len(sub.Items.Data), sub.Items.HasMore
		if len(sub.Items.Data) > 0 {
			it := sub.Items.Data[0]
			v.ItemID, v.Quantity = it.ID, it.Quantity
			if it.Price != nil {
				v.PriceID = it.Price.ID
			}
		}
	}
	v.FirstItem, v.FirstItemOK = firstItemID(sub)
	return v
}

// compareDecodings decodes body both ways, stripe-go's whole object and
// wire.go's few fields, and compares what billingd derives from each.
func compareDecodings(t *testing.T, what string, a answer) {
	t.Helper()
	switch {
	case strings.HasSuffix(a.path, "/v1/invoices/create_preview"):
		var full stripe.Invoice
		var w wireInvoice
		if err := json.Unmarshal(a.body, &full); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(a.body, &w); err != nil {
			t.Fatalf("%s: wire decoding of %s: %v", what, a.path, err)
		}
		if got, want := viewInvoice(w.invoice()), viewInvoice(&full); !reflect.DeepEqual(got, want) {
			t.Errorf("%s %s:\nwire      %+v\nstripe-go %+v", what, a.path, got, want)
		}
	case strings.HasPrefix(a.path, "/v1/subscriptions/"):
		var full stripe.Subscription
		var w wireSubscription
		if err := json.Unmarshal(a.body, &full); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(a.body, &w); err != nil {
			t.Fatalf("%s: wire decoding of %s: %v", what, a.path, err)
		}
		sub, err := w.subscription()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got, want := viewSubscription(sub), viewSubscription(&full); !reflect.DeepEqual(got, want) {
			t.Errorf("%s %s:\nwire      %+v\nstripe-go %+v", what, a.path, got, want)
		}
	}
}

// The answers a handshake reads (preview, subscription read, update),
// decoded by wire.go, give billingd the same values as stripe-go's whole
// objects: from the stateful fake (real arithmetic, schedules), from
// stripe-mock (Stripe's own fixtures) and for the shapes neither sends
// (unexpanded references, nulls).
func TestWireDecodesWhatStripeGoDecodes(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		var rec recorder
		e := newFakeEnv(t, Config{WrapTransport: rec.wrap})
		e.fake.SetPrice(priceStarter, 900, "usd")
		ctx := context.Background()
		for _, chargeNow := range []bool{true, false} {
			if _, err := e.p.PreviewPlanChange(ctx, e.change(priceScale, chargeNow)); err != nil {
				t.Fatal(err)
			}
		}
		e.read(t)
		if _, err := e.p.ApplyPlanChange(ctx, e.change(priceScale, true), "k-up"); err != nil {
			t.Fatal(err)
		}
		e.read(t)
		if _, err := e.p.ApplyPlanChange(ctx, e.change(pricePro, false), "k-down"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.p.PreviewPlanChange(ctx, e.atPeriodEnd(priceStarter, "cfm_2")); err != nil {
			t.Fatal(err)
		}
		e.scheduleStarter(t)
		if got := e.read(t); got.Schedule == nil {
			t.Fatal("no schedule read back: the case with one is not covered")
		}
		checkAnswers(t, "fake", rec.answers)
	})
	t.Run("stripe-mock", func(t *testing.T) {
		var rec recorder
		p := New(Config{SecretKey: "sk_test_123", APIBase: testenv.StripeMock(t), WrapTransport: rec.wrap})
		ctx := context.Background()
		for _, chargeNow := range []bool{true, false} {
			if _, err := p.PreviewPlanChange(ctx, mockChange(chargeNow)); err != nil {
				t.Fatal(err)
			}
			if _, err := p.ApplyPlanChange(ctx, mockChange(chargeNow), "k"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.ReadSubscription(ctx, "sub_123"); err != nil {
			t.Fatal(err)
		}
		checkAnswers(t, "stripe-mock", rec.answers)
	})
	t.Run("shapes", func(t *testing.T) {
		for _, body := range []string{
			`{"id":"sub_1","status":"active","latest_invoice":"in_1","schedule":"sub_sched_1","items":{"data":[{"id":"si_1","quantity":1,"price":"price_1"}]}}`,
			`{"id":"sub_1","status":"past_due","latest_invoice":null,"schedule":null,"items":null,"metadata":null}`,
			`{"id":"sub_1","metadata":{"billingd_confirmation_id":"cfm_1"},"items":{"has_more":true,"data":[{"id":"si_1","quantity":2,"price":null}]},` +
				`"latest_invoice":{"id":"in_1","currency":"eur","amount_due":1200,"created":1700000000,"billing_reason":"subscription_update",` +
				`"subscription_details":{"metadata":{"billingd_confirmation_id":"cfm_1"}},"lines":{"has_more":false,"data":[` +
				`{"amount":-500,"proration":true,"period":{"start":1700000000,"end":1701000000},"price":{"id":"price_old"}},` +
				`{"amount":1700,"proration":true,"period":null,"price":"price_new"}]}}}`,
			`{"id":"sub_1","schedule":{"id":"sub_sched_1","status":"active","phases":[]}}`,
		} {
			compareDecodings(t, "shape", answer{path: "/v1/subscriptions/sub_1", body: []byte(body)})
		}
		for _, body := range []string{
			`{"id":"in_1","currency":"usd","amount_due":820,"subtotal":1500,"total":1320,"starting_balance":-500,` +
				`"total_tax_amounts":[{"amount":120,"inclusive":false},{"amount":99,"inclusive":true}],` +
				`"lines":{"has_more":false,"data":[{"amount":1500,"proration":true}]}}`,
			`{"id":"in_2","currency":"usd","amount_due":400,"subtotal":400,"total":400,"lines":{"has_more":true,"data":[]}}`,
			`{"id":"in_3","currency":"usd","amount_due":0,"subtotal":-900,"total":-900,"lines":null,"total_tax_amounts":null}`,
		} {
			compareDecodings(t, "shape", answer{path: "/v1/invoices/create_preview", body: []byte(body)})
		}
	})
}

func checkAnswers(t *testing.T, what string, answers []answer) {
	t.Helper()
	seen := map[string]int{}
	for _, a := range answers {
		compareDecodings(t, what, a)
		seen[strings.Split(strings.TrimPrefix(a.path, "/v1/"), "/")[0]]++
	}
	if seen["invoices"] == 0 || seen["subscriptions"] == 0 {
		t.Errorf("%s: answers compared %v; want previews and subscriptions", what, seen)
	}
}

// BenchmarkDecode compares decoding the fake's answers into stripe-go's
// whole objects with decoding them into wire.go's structs.
func BenchmarkDecode(b *testing.B) {
	var rec recorder
	newBenchFake(b, &rec)
	bodies := map[string][]byte{}
	for _, a := range rec.answers {
		switch {
		case strings.HasSuffix(a.path, "create_preview"):
			bodies["preview"] = a.body
		case strings.HasPrefix(a.path, "/v1/subscriptions/"):
			bodies["subscription"] = a.body
		}
	}
	for _, kind := range []string{"preview", "subscription"} {
		body := bodies[kind]
		b.Run(kind+"/stripe-go", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if kind == "preview" {
					err = json.Unmarshal(body, &stripe.Invoice{})
				} else {
					err = json.Unmarshal(body, &stripe.Subscription{})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(kind+"/wire", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if kind == "preview" {
					var w wireInvoice
					if err := json.Unmarshal(body, &w); err != nil {
						b.Fatal(err)
					}
					_ = w.invoice()
				} else {
					var w wireSubscription
					if err := json.Unmarshal(body, &w); err != nil {
						b.Fatal(err)
					}
					if _, err := w.subscription(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// newBenchFake runs a preview and an upgrade (the update's answer, with
// its invoice) against the fake, recording the answers.
func newBenchFake(b *testing.B, rec *recorder) {
	b.Helper()
	fake := stripepaytest.New()
	fake.SetClock(func() time.Time { return periodStart })
	fake.SetPrice(pricePro, 1900, "usd")
	fake.SetPrice(priceScale, 4900, "usd")
	srv := httptest.NewServer(fake.Handler())
	b.Cleanup(srv.Close)
	p := New(Config{SecretKey: "sk_test_fake", APIBase: srv.URL, WrapTransport: rec.wrap})
	ctx := context.Background()
	cust, err := p.CreateCustomer(ctx, billing.NewCustomer{OrgID: "org_1", Name: "n", Email: "e@example.com", PriceID: pricePro}, "org:1")
	if err != nil {
		b.Fatal(err)
	}
	change := billing.PlanChange{CustomerID: cust.CustomerID, SubscriptionID: cust.SubscriptionID, ItemID: cust.ItemID,
		NewPriceID: priceScale, ProrationDate: periodStart.Add(15 * 24 * time.Hour), ChargeNow: true}
	if _, err := p.PreviewPlanChange(ctx, change); err != nil {
		b.Fatal(err)
	}
	if _, err := p.ApplyPlanChange(ctx, change, "k"); err != nil {
		b.Fatal(err)
	}
}
