package billing_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/billing/billingtest"
)

// lastClaims are the claims of the last receipt s signed.
func lastClaims(t *testing.T, s *claimsSigner) billing.ReceiptClaims {
	t.Helper()
	if len(s.signed) == 0 {
		t.Fatal("no receipt signed")
	}
	return s.signed[len(s.signed)-1]
}

// settledWithLatestInvoice makes an upgrade whose request Stripe applied
// while its answer was lost, with latest as the subscription's latest
// invoice when it is read back (given the confirmation), and settles it.
// It returns the recorded answer and the receipt's claims.
func settledWithLatestInvoice(t *testing.T, latest func(c billing.Confirmation) *billing.Invoice) (billing.ChangeResult, billing.ReceiptClaims) {
	return settledWith(t, latest, nil, nil)
}

// settledWith is settledWithLatestInvoice with listed as the subscription's
// invoices Stripe lists (given the confirmation; nil: none), or listErr.
func settledWith(t *testing.T, latest func(c billing.Confirmation) *billing.Invoice,
	listed func(c billing.Confirmation) []billing.Invoice, listErr error) (billing.ChangeResult, billing.ReceiptClaims) {
	t.Helper()
	f := newHandshakeFixture(t)
	signer := &claimsSigner{}
	svc, err := billing.NewService(billing.Config{Store: f.store, Payments: f.provider, Catalog: testCatalog(t, billing.DefaultPlans()),
		TokenTTL: time.Minute, Livemode: true, Receipts: signer})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	f.svc = svc
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	fivexx := fmt.Errorf("stripe 500: %w: %w", billing.ErrUnavailable, billing.ErrProviderFailed)
	f.provider.ApplyErrs = []error{fivexx, fivexx}
	_, err = f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, billing.CodeUpstreamUnavailable)
	// Applied after all; its answer was lost.
	f.provider.ReadState.PriceID, f.provider.ReadState.ConfirmationID = "price_billingd_scale", p.ConfirmationID
	c := f.confirmation(t, p.ConfirmationID)
	f.provider.ReadState.LatestInvoice = latest(c)
	if listed != nil {
		f.provider.Invoices = listed(c)
	}
	f.provider.ListErr = listErr
	f.store.Advance(time.Second)
	if n, err := f.svc.SettleUnknownOutcomes(context.Background(), time.Millisecond, 10); err != nil || n != 1 {
		t.Fatalf("settled %d: %v", n, err)
	}
	res, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if !res.Replayed || res.Charged == nil {
		t.Fatalf("answer after settling: %+v", res)
	}
	return res, lastClaims(t, signer)
}

// renewalOf is the renewal invoice Stripe made after c's change: it
// carries the subscription's metadata, so it names c too.
func renewalOf(c billing.Confirmation) *billing.Invoice {
	return &billing.Invoice{ID: "in_18", AmountDueCents: 4900, Currency: "usd", ConfirmationID: c.ID,
		BillingReason: "subscription_cycle", Created: c.Terms.NextChargeAt}
}

// TestSettledReceiptNamesTheChangesOwnInvoice (issue 27): a change settled
// after the fact states the invoice Stripe made for it, and only that one.
// The latest invoice is a renewal's (with the same metadata), another
// update's, or none: the amount invoiced is then unknown, and never the
// renewal's nor the quote (before: $49.00 of the renewal, or the quote, with
// a notice blaming tax or discounts).
func TestSettledReceiptNamesTheChangesOwnInvoice(t *testing.T) {
	own := func(c billing.Confirmation) *billing.Invoice {
		return &billing.Invoice{ID: "in_7", AmountDueCents: 2096, Currency: "usd", ConfirmationID: c.ID,
			BillingReason: billing.BillingReasonUpdate, Created: c.AttemptedAt,
			Prorations: []billing.ProrationLine{{PriceID: c.Terms.ToPriceID, Start: c.Terms.ProrationDate}}}
	}
	tests := []struct {
		name   string
		latest func(billing.Confirmation) *billing.Invoice
		want   *billing.Invoice // nil: unknown
	}{
		{"own proration invoice", own, &billing.Invoice{ID: "in_7", AmountDueCents: 2096}},
		{"renewal after the change", renewalOf, nil},
		{"no invoice", func(billing.Confirmation) *billing.Invoice { return nil }, nil},
		{"update of another proration date", func(c billing.Confirmation) *billing.Invoice {
			inv := own(c)
			inv.Prorations[0].Start = c.Terms.ProrationDate.Add(-time.Hour)
			return inv
		}, nil},
		{"update made before the attempt", func(c billing.Confirmation) *billing.Invoice {
			inv := own(c)
			inv.Created = c.AttemptedAt.Add(-time.Hour)
			return inv
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, claims := settledWithLatestInvoice(t, tt.latest)
			ch := res.Charged
			if ch.QuotedAmountDueNowCents != 1742 || claims.QuotedAmountDueNowCents != 1742 {
				t.Fatalf("quoted %d in the answer, %d in the receipt", ch.QuotedAmountDueNowCents, claims.QuotedAmountDueNowCents)
			}
			if tt.want != nil {
				if ch.AmountInvoicedUnknown || ch.AmountDueNowCents == nil || *ch.AmountDueNowCents != tt.want.AmountDueCents ||
					ch.InvoiceID != tt.want.ID || claims.AmountInvoicedUnknown || claims.AmountDueNowCents == nil ||
					*claims.AmountDueNowCents != tt.want.AmountDueCents || claims.InvoiceID != tt.want.ID {
					t.Fatalf("charged %+v, receipt %+v: want %s's %d", ch, claims, tt.want.ID, tt.want.AmountDueCents)
				}
				return
			}
			if !ch.AmountInvoicedUnknown || ch.AmountDueNowCents != nil || ch.InvoiceID != "" {
				t.Fatalf("charged %+v: want the amount invoiced unknown", ch)
			}
			if !claims.AmountInvoicedUnknown || claims.AmountDueNowCents != nil || claims.InvoiceID != "" {
				t.Fatalf("receipt states %v invoiced (invoice %q, unknown %t): want it unknown",
					claims.AmountDueNowCents, claims.InvoiceID, claims.AmountInvoicedUnknown)
			}
			if strings.Contains(res.Notice, "tax") || strings.Contains(res.Notice, "$49.00") || !strings.Contains(res.Notice, "unknown") {
				t.Fatalf("notice %q", res.Notice)
			}
		})
	}
}

// TestUpgradeAnsweredWithoutInvoice: an upgrade's answer that names no
// invoice states the amount invoiced as unknown, never the quote.
func TestUpgradeAnsweredWithoutInvoice(t *testing.T) {
	f := newHandshakeFixture(t)
	signer := &claimsSigner{}
	svc, err := billing.NewService(billing.Config{Store: f.store, Payments: noInvoiceProvider{f.provider},
		Catalog: testCatalog(t, billing.DefaultPlans()), TokenTTL: time.Minute, Livemode: true, Receipts: signer})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	f.svc = svc
	p := f.propose(t, alice, billing.OpUpgrade, "scale")
	res, err := f.confirm(alice, billing.OpUpgrade, "scale", p.ConfirmToken)
	wantCode(t, err, "")
	if ch := res.Charged; ch == nil || !ch.AmountInvoicedUnknown || ch.AmountDueNowCents != nil {
		t.Fatalf("charged %+v: want unknown", res.Charged)
	}
	if c := lastClaims(t, signer); !c.AmountInvoicedUnknown || c.AmountDueNowCents != nil || c.InvoiceID != "" {
		t.Fatalf("receipt %+v: want the amount invoiced unknown", c)
	}
}

// noInvoiceProvider answers an applied change without its invoice.
type noInvoiceProvider struct{ *billingtest.Provider }

func (p noInvoiceProvider) ApplyPlanChange(ctx context.Context, change billing.PlanChange, key string) (billing.AppliedChange, error) {
	applied, err := p.Provider.ApplyPlanChange(ctx, change, key)
	applied.Invoice = nil
	return applied, err
}

// ownProrationInvoice is the invoice Stripe made for c's upgrade.
func ownProrationInvoice(c billing.Confirmation) billing.Invoice {
	return billing.Invoice{ID: "in_7", AmountDueCents: 2096, Currency: "usd", ConfirmationID: c.ID,
		BillingReason: billing.BillingReasonUpdate, Created: c.AttemptedAt,
		Prorations: []billing.ProrationLine{{PriceID: c.Terms.FromPriceID, Start: c.Terms.ProrationDate},
			{PriceID: c.Terms.ToPriceID, Start: c.Terms.ProrationDate}}}
}

// TestSettledAfterRenewalFindsTheOwnInvoice (issue 27): the latest invoice
// is the renewal's; the change's own is found among the subscription's
// invoices since its recovery point and stated. Listed invoices that are
// not its own (the renewal, one made before the attempt) are never taken
// for it, and a failed listing leaves the amount unknown.
func TestSettledAfterRenewalFindsTheOwnInvoice(t *testing.T) {
	tests := []struct {
		name    string
		listed  func(c billing.Confirmation) []billing.Invoice
		listErr error
		want    string // invoice id; "": unknown
	}{
		{"renewal then own", func(c billing.Confirmation) []billing.Invoice {
			return []billing.Invoice{*renewalOf(c), ownProrationInvoice(c)}
		}, nil, "in_7"},
		{"renewal alone", func(c billing.Confirmation) []billing.Invoice { return []billing.Invoice{*renewalOf(c)} }, nil, ""},
		{"own made before the attempt", func(c billing.Confirmation) []billing.Invoice {
			own := ownProrationInvoice(c)
			own.Created = c.AttemptedAt.Add(-time.Hour)
			return []billing.Invoice{*renewalOf(c), own}
		}, nil, ""},
		{"listing fails", func(c billing.Confirmation) []billing.Invoice {
			return []billing.Invoice{*renewalOf(c), ownProrationInvoice(c)}
		}, fmt.Errorf("list: %w", billing.ErrUnavailable), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, claims := settledWith(t, renewalOf, tt.listed, tt.listErr)
			ch := res.Charged
			if tt.want == "" {
				if !ch.AmountInvoicedUnknown || ch.InvoiceID != "" || !claims.AmountInvoicedUnknown || claims.AmountDueNowCents != nil {
					t.Fatalf("charged %+v, receipt %+v: want the amount unknown", ch, claims)
				}
				return
			}
			if ch.AmountInvoicedUnknown || ch.InvoiceID != tt.want || ch.AmountDueNowCents == nil || *ch.AmountDueNowCents != 2096 ||
				claims.InvoiceID != tt.want || claims.AmountDueNowCents == nil || *claims.AmountDueNowCents != 2096 {
				t.Fatalf("charged %+v, receipt %+v: want %s's 2096", ch, claims, tt.want)
			}
		})
	}
}
