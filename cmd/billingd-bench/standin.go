package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// startStripe serves the Stripe stand-in the options ask for and sets
// e.stripeURL. canned and fake run in this process on loopback, so
// billingd's HTTP client path to Stripe is real but Stripe's own latency is
// not measured, except in the rows at Stripe's pace, where e.pacer slows
// them; mock runs stripe-mock, for realism.
func (e *env) startStripe(ctx context.Context) error {
	switch e.opts.stripe {
	case stripeMock:
		return e.startStripeMock(ctx)
	case stripeFake:
		fake := stripepaytest.New()
		for _, p := range billing.DefaultPlans() {
			fake.SetPrice(p.StripePriceID, p.AmountCents, p.Currency)
		}
		e.pacer = fake.Pacer()
		return e.serveStripe(fake.Handler())
	default:
		e.canned = &cannedSubscriptions{}
		e.pacer = stripepaytest.NewPacer(cannedStripe(e.canned))
		return e.serveStripe(e.pacer)
	}
}

func (e *env) serveStripe(h http.Handler) error {
	addr, err := e.serve(h)
	e.stripeURL = "http://" + addr
	return err
}

// cannedStripe answers the five Stripe requests billingd makes with fixed
// bodies, echoing the ids billingd reads back and remembering only each
// subscription's item and price, which billingd checks before a change. It
// keeps no idempotency keys, so its cost per request is a form parse, a
// map access and a small JSON encoding: the stand-in for "Stripe answered
// instantly". (The stateful fake keeps every saved response for replay,
// whose memory and GC this process would pay for during the measurement.)
func cannedStripe(subs *cannedSubscriptions) http.Handler {
	var seq atomic.Int64
	periodEnd := time.Now().Add(30 * 24 * time.Hour).Unix()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/customers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"id": fmt.Sprintf("cus_bench%d", seq.Add(1)), "object": "customer"})
	})
	mux.HandleFunc("POST /v1/subscriptions", func(w http.ResponseWriter, r *http.Request) {
		n := seq.Add(1)
		id, item := fmt.Sprintf("sub_bench%d", n), cannedItem{fmt.Sprintf("si_bench%d", n), r.FormValue("items[0][price]"), periodEnd}
		subs.Store(id, item)
		writeJSON(w, cannedSubscription(id, item.id, item.price, item.periodEnd))
	})
	mux.HandleFunc("POST /v1/subscriptions/{id}", func(w http.ResponseWriter, r *http.Request) {
		item := cannedItem{r.FormValue("items[0][id]"), r.FormValue("items[0][price]"), periodEnd}
		oldPrice := "price_billingd_pro"
		if v, ok := subs.Load(r.PathValue("id")); ok {
			item.periodEnd = v.(cannedItem).periodEnd // a price swap keeps the period
			oldPrice = v.(cannedItem).price
		}
		subs.Store(r.PathValue("id"), item)
		sub := cannedSubscription(r.PathValue("id"), item.id, item.price, item.periodEnd)
		if r.FormValue("proration_behavior") == "always_invoice" {
			// As Stripe: an update invoiced at once answers with the
			// invoice it made (billingd expands latest_invoice), so that
			// billingd states the amount invoiced, as it does in production,
			// instead of warning that it is unknown.
			prorationDate, _ := strconv.ParseInt(r.FormValue("proration_date"), 10, 64)
			sub = withLatestInvoice(sub, cannedInvoice(fmt.Sprintf("in_bench%d", seq.Add(1)),
				r.FormValue("metadata[billingd_confirmation_id]"), oldPrice, item.price, prorationDate, item.periodEnd, time.Now().Unix()))
		}
		writeJSON(w, sub)
	})
	mux.HandleFunc("GET /v1/subscriptions/{id}", func(w http.ResponseWriter, r *http.Request) {
		v, ok := subs.Load(r.PathValue("id"))
		if !ok { // seeded straight into the database: on Pro, as the seed makes it
			v = cannedItem{"si_bench", "price_billingd_pro", periodEnd}
		}
		item := v.(cannedItem)
		writeJSON(w, cannedSubscription(r.PathValue("id"), item.id, item.price, item.periodEnd))
	})
	preview, err := json.Marshal(cannedPreview)
	if err != nil {
		panic(err) // a constant
	}
	mux.HandleFunc("POST /v1/invoices/create_preview", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(preview)
	})
	return mux
}

// cannedItem is what cannedStripe remembers of a subscription.
type cannedItem struct {
	id, price string
	periodEnd int64
}

// cannedSubscriptions maps a subscription id to its cannedItem. The bench
// sets it from the database after the pgbench mirror, which changes plans
// behind the stand-in's back (syncPlans).
type cannedSubscriptions struct{ sync.Map }

func (c *cannedSubscriptions) set(subscriptionID, itemID, priceID string, periodEnd time.Time) {
	c.Store(subscriptionID, cannedItem{itemID, priceID, periodEnd.Unix()})
}

// cannedSubscription is a subscription's JSON, appended by hand: encoding
// maps of maps for every request was most of the stand-in's own CPU.
// TestCannedSubscription checks it against encoding/json.
func cannedSubscription(id, itemID, priceID string, periodEnd int64) json.RawMessage {
	b := make([]byte, 0, 256)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"subscription","status":"active","current_period_end":`...)
	b = strconv.AppendInt(b, periodEnd, 10)
	b = append(b, `,"items":{"object":"list","has_more":false,"data":[{"id":`...)
	b = appendJSONString(b, itemID)
	b = append(b, `,"object":"subscription_item","quantity":1,"price":{"id":`...)
	b = appendJSONString(b, priceID)
	b = append(b, `,"object":"price"}}]}}`...)
	return b
}

// cannedInvoice is the invoice an upgrade invoiced at once makes: the
// preview's amount, the unused time of the old price credited and the new
// price charged from the proration date, named by the confirmation's
// metadata, appended by hand like cannedSubscription.
func cannedInvoice(id, confirmationID, oldPrice, newPrice string, prorationDate, periodEnd, created int64) json.RawMessage {
	b := make([]byte, 0, 512)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"object":"invoice","currency":"usd","amount_due":1500,"subtotal":1500,"total":1500,`+
		`"billing_reason":"subscription_update","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"subscription_details":{"metadata":{"billingd_confirmation_id":`...)
	b = appendJSONString(b, confirmationID)
	b = append(b, `}},"lines":{"object":"list","has_more":false,"data":[`...)
	for i, l := range []struct {
		price  string
		amount int64
	}{{oldPrice, -950}, {newPrice, 2450}} {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"line_item","currency":"usd","proration":true,"amount":`...)
		b = strconv.AppendInt(b, l.amount, 10)
		b = append(b, `,"period":{"start":`...)
		b = strconv.AppendInt(b, prorationDate, 10)
		b = append(b, `,"end":`...)
		b = strconv.AppendInt(b, periodEnd, 10)
		b = append(b, `},"price":{"id":`...)
		b = appendJSONString(b, l.price)
		b = append(b, `,"object":"price"}}`...)
	}
	return append(b, `]}}`...)
}

// withLatestInvoice is the subscription sub with inv as its expanded
// latest_invoice.
func withLatestInvoice(sub, inv json.RawMessage) json.RawMessage {
	out := append(sub[:len(sub)-1:len(sub)-1], `,"latest_invoice":`...)
	out = append(out, inv...)
	return append(out, '}')
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// cannedPreview is a preview invoice of a Pro → Scale change halfway through
// the period: the unused Pro time credited, the rest of Scale charged.
var cannedPreview = map[string]any{
	"object": "invoice", "currency": "usd", "amount_due": 1500, "subtotal": 1500, "total": 1500,
	"lines": map[string]any{"object": "list", "has_more": false, "data": []any{
		map[string]any{"object": "line_item", "amount": -950, "currency": "usd", "proration": true},
		map[string]any{"object": "line_item", "amount": 2450, "currency": "usd", "proration": true},
	}},
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if raw, ok := v.(json.RawMessage); ok {
		_, _ = w.Write(raw)
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

// startStripeMock uses STRIPE_MOCK_URL, or starts stripe-mock from PATH,
// .tools/ (make tools) or $GOPATH/bin on free loopback ports.
func (e *env) startStripeMock(ctx context.Context) error {
	if u := os.Getenv("STRIPE_MOCK_URL"); u != "" {
		e.stripeURL = u
		return nil
	}
	bin, err := findStripeMock()
	if err != nil {
		return err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return err
	}
	httpsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "-http-addr", httpAddr, "-https-addr", httpsAddr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	e.cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	e.stripeURL = "http://" + httpAddr
	return waitAnswering(ctx, e.stripeURL+"/v1/customers")
}

func findStripeMock() (string, error) {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p, nil
	}
	var candidates []string
	if out, err := exec.Command("go", "env", "GOMOD", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) == 2 {
			tools, _ := filepath.Glob(filepath.Join(filepath.Dir(lines[0]), ".tools", "stripe-mock@*", "stripe-mock"))
			candidates = append(tools, filepath.Join(filepath.SplitList(lines[1])[0], "bin", "stripe-mock"))
		}
	}
	for _, p := range candidates {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("stripe-mock not found on PATH, in .tools/ or $GOPATH/bin (make tools installs it), and STRIPE_MOCK_URL is unset")
}

// waitAnswering polls url until it answers with any status.
func waitAnswering(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within 30s", url)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
