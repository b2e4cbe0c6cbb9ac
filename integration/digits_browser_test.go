package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/billingd/billingd/internal/auth"
)

// TestCurrencyDigitsInBrowser: in Chromium, whose own currency data has 0
// digits for ISK and divides KWD by 1000 only if told, the dashboard (plans
// and the confirmation dialog), the receipt view and the MCP Apps view write
// every amount as the summary does, from the server's currency_exponent:
// 5120 in kwd is 5.120 KWD, 50000 in isk is 500 ISK, yen have no fraction,
// dollars two digits (issue 27). A downgrade at the period's end is used
// because what it quotes is the plan's price, not a proration: each page
// must show exactly the catalog's figure.
func TestCurrencyDigitsInBrowser(t *testing.T) {
	t.Parallel()
	for _, c := range digitsClasses {
		if c.currency == "cop" {
			continue // the same digits as usd in the pages; TestCurrencyDigits covers it
		}
		t.Run(c.currency, func(t *testing.T) {
			b := newBrowser(t)
			h := digitsHarness(t, c, "digits", "premium", withEnv("CONFIRM_TTL", "5m"))
			standard, premium, nothing := c.money(c.prices[1]), c.money(c.prices[2]), c.money(0)
			chargedThen := standard + " will be charged then."

			// The MCP Apps view, in a host.
			host := startAppHost(t, h)
			view := b.openViewAt(host, h.mcpToken("digits", "dana", "chat-host", auth.ScopeRead, auth.ScopeWrite),
				"downgrade_plan", "standard", "period_end")
			view.waitState("pending")
			if summary := view.text("summary"); !strings.Contains(summary, chargedThen) {
				t.Fatalf("the view's summary %q does not say %q", summary, chargedThen)
			}
			amounts := termsOf(t, view.ctx, "amounts")
			wantTerm(t, "the MCP Apps view", amounts, "Due now", nothing)
			wantTerm(t, "the MCP Apps view", amounts, "Charged on *", standard)

			// The dashboard: the catalog, the dialog, the receipt.
			b.do(chromedp.Navigate(h.url + "/"))
			b.signIn(h.admin("digits", "dana"))
			b.waitText("sub-plan", "Premium")
			plans := b.text("plans")
			for _, want := range []string{standard + " / month", premium + " / month"} {
				if !strings.Contains(plans, want) {
					t.Errorf("the dashboard's plans lack %q:\n%s", want, plans)
				}
			}
			b.do(chromedp.SetValue(chromedp.CSS(`select[data-focus-key="when:standard"]`), "period_end"))
			b.do(chromedp.Click(chromedp.CSS(`button[data-focus-key="plan:standard"]`)))
			b.do(chromedp.WaitVisible(chromedp.ID("confirm-dialog")))
			if summary := b.text("confirm-summary"); !strings.Contains(summary, chargedThen) {
				t.Fatalf("the dialog's summary %q does not say %q", summary, chargedThen)
			}
			facts := termsOf(t, b.ctx, "confirm-facts")
			wantTerm(t, "the dashboard's dialog", facts, "Due now", nothing)
			wantTerm(t, "the dashboard's dialog", facts, "Charged on *", standard)
			b.do(chromedp.Click(chromedp.ID("confirm-ok")))
			b.do(chromedp.WaitVisible(chromedp.ID("receipt")))
			claims := termsOf(t, b.ctx, "receipt-claims")
			wantTerm(t, "the receipt view", claims, "Due now", nothing)
			wantTerm(t, "the receipt view", claims, "Quoted for the renewal", standard+" = "+standard)
			b.wantNoScriptErrors()
		})
	}
}

// termsOf reads a <dl>'s terms and their descriptions, by the term.
func termsOf(t *testing.T, ctx context.Context, id string) map[string]string {
	t.Helper()
	data, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(Object.fromEntries(
		[...document.getElementById(`+jsString(id)+`).querySelectorAll("dt")].map((dt) => [dt.textContent, dt.nextElementSibling.textContent])))`))
	if err != nil {
		t.Fatalf("the terms of #%s: %v", id, err)
	}
	terms := map[string]string{}
	if err := json.Unmarshal([]byte(data), &terms); err != nil {
		t.Fatal(err)
	}
	return terms
}

// wantTerm requires the description of term (a prefix if it ends in "*").
func wantTerm(t *testing.T, where string, terms map[string]string, term, want string) {
	t.Helper()
	for got, value := range terms {
		if got == term || strings.HasSuffix(term, "*") && strings.HasPrefix(got, strings.TrimSuffix(term, "*")) {
			if value != want {
				t.Errorf("%s: %s is %q, want %q", where, got, value, want)
			}
			return
		}
	}
	t.Errorf("%s says nothing of %q: %q", where, term, terms)
}
