package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// digitsClass is a catalog in a currency of one of the classes of Stripe's
// currency table (contract §6), with the amounts written as people write
// them, worked out here, not by billingd.
type digitsClass struct {
	currency string
	prices   [3]int64 // free, standard, premium
	exponent int      // Stripe's digits, as details.currency_exponent states them
	whole    bool     // a zero fraction is left out (Stripe's special cases)
	money    func(int64) string
	head     string // the summary's plans, with their prices
}

func (c digitsClass) String() string { return c.currency }

// digitsClasses: three-decimal, Stripe's special case (hundredths written
// whole), zero-decimal, a currency CLDR writes whole but Stripe counts in
// hundredths, and an ordinary one.
var digitsClasses = []digitsClass{
	{"kwd", [3]int64{0, 5120, 12500}, 3, false,
		func(n int64) string { return fmt.Sprintf("%s.%03d KWD", grouped(n/1000), n%1000) },
		"from Standard (5.120 KWD/mo) to Premium (12.500 KWD/mo)."},
	{"isk", [3]int64{0, 50000, 190000}, 2, true,
		func(n int64) string {
			if n%100 == 0 {
				return grouped(n/100) + " ISK"
			}
			return fmt.Sprintf("%s.%02d ISK", grouped(n/100), n%100)
		},
		"from Standard (500 ISK/mo) to Premium (1,900 ISK/mo)."},
	{"jpy", [3]int64{0, 1900, 4900}, 0, false,
		func(n int64) string { return "¥" + grouped(n) },
		"from Standard (¥1,900/mo) to Premium (¥4,900/mo)."},
	{"cop", [3]int64{0, 190000, 490000}, 2, false,
		func(n int64) string { return fmt.Sprintf("%s.%02d COP", grouped(n/100), n%100) },
		"from Standard (1,900 COP/mo) to Premium (4,900 COP/mo)."},
	{"usd", [3]int64{0, 1900, 4900}, 2, false,
		func(n int64) string { return fmt.Sprintf("$%s.%02d", grouped(n/100), n%100) },
		"from Standard ($19/mo) to Premium ($49/mo)."},
}

// digitsHarness is a billingd whose catalog is in c's currency, with an org
// on plan.
func digitsHarness(t *testing.T, c digitsClass, org, plan string, opts ...option) *harness {
	t.Helper()
	h := newHarness(t, append(opts, withEnv("PLANS_FILE", plansFile(t, c.currency, c.prices)))...)
	for i, id := range []string{"free", "standard", "premium"} {
		h.fake.SetPrice("price_"+c.currency+"_"+id, c.prices[i], c.currency)
	}
	h.createOrg(org, "Digits Ltd", plan)
	return h
}

// TestCurrencyDigits: in every class of Stripe's currency table the first
// call's answer states Stripe's digits (details.currency_exponent, REST and
// MCP), the summary writes every amount with them (5120 in kwd is 5.120
// KWD, 50000 in isk is 500 ISK), and so do the plans and the receipt
// (issue 27).
func TestCurrencyDigits(t *testing.T) {
	t.Parallel()
	for _, c := range digitsClasses {
		t.Run(c.currency, func(t *testing.T) {
			t.Parallel()
			h := digitsHarness(t, c, "digits", "standard")
			tok := h.user("digits", "dana")

			var plans struct {
				Plans []map[string]any `json:"plans"`
			}
			h.do("GET", "/api/billing/plans", tok, nil).decode(t, &plans)
			for _, p := range plans.Plans {
				c.wantDigits(t, "plan "+fmt.Sprint(p["id"]), p)
			}

			r := h.do("POST", "/api/billing/upgrade", tok, map[string]string{"to": "premium"})
			wantStatus(t, r, http.StatusAccepted, "")
			var p struct {
				Summary      string         `json:"summary"`
				ConfirmToken string         `json:"confirm_token"`
				Details      map[string]any `json:"details"`
			}
			r.decode(t, &p)
			c.wantDigits(t, "REST details", p.Details)
			due := int64(p.Details["amount_due_now_cents"].(float64))
			if want := c.money(due) + " due now;"; !strings.Contains(p.Summary, want) || !strings.Contains(p.Summary, c.head) {
				t.Fatalf("summary\n  %q\ndoes not say\n  %q and %q", p.Summary, c.head, want)
			}

			cs := mcpConnect(t, h.url, h.mcpUser("digits", "dana"), "")
			var mp struct {
				Details map[string]any `json:"details"`
			}
			wantSuccess(t, callTool(t, cs, "upgrade_plan", map[string]any{"to": "premium"}), &mp)
			c.wantDigits(t, "MCP structuredContent details", mp.Details)
			var mplans struct {
				Plans []map[string]any `json:"plans"`
			}
			wantSuccess(t, callTool(t, cs, "list_plans", nil), &mplans)
			for _, p := range mplans.Plans {
				c.wantDigits(t, "MCP plan "+fmt.Sprint(p["id"]), p)
			}

			// The REST proposal was superseded by the MCP one: propose again.
			q := h.propose(tok, "upgrade", "premium")
			done := h.confirm(tok, "upgrade", "premium", q.ConfirmToken)
			wantStatus(t, done, http.StatusOK, "")
			var executed executedWithReceipt
			done.decode(t, &executed)
			c.wantDigits(t, "receipt claims", receiptPayload(t, executed.Receipt))
		})
	}
}

// wantDigits requires obj to state c's digits under the contract's names.
func (c digitsClass) wantDigits(t *testing.T, what string, obj map[string]any) {
	t.Helper()
	exp, ok := obj["currency_exponent"].(float64)
	if !ok || int(exp) != c.exponent || obj["currency_written_whole"] != c.whole {
		t.Fatalf("%s: currency_exponent %v, currency_written_whole %v; want %d, %v (%v)",
			what, obj["currency_exponent"], obj["currency_written_whole"], c.exponent, c.whole, obj)
	}
}

// receiptPayload is a receipt's claims as JSON names them (the signature is
// checked by the evidence tests).
func receiptPayload(t *testing.T, jws string) map[string]any {
	t.Helper()
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		t.Fatalf("receipt %q is not a compact JWS", jws)
	}
	data, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(data, &claims); err != nil {
		t.Fatal(err)
	}
	return claims
}
