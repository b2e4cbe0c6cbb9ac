package stripepaytest

// The arithmetic of an invoice's totals, following Stripe's invoice object
// and its guides on coupons, tax rates and the customer balance, so that
// tests check billingd's statements against Stripe's rules rather than
// billingd's own:
//
//  1. subtotal: the sum of the lines' amounts (prorations included).
//  2. Discounts (a coupon on the customer): percent_off applies to every
//     line, credits of prorations included, each line's discount rounded to
//     the nearest minor unit; amount_off comes off the invoice once and
//     never takes the total below zero. total_discount_amounts holds the
//     sum.
//  3. Tax (a tax rate on the subscription, its default_tax_rates): taxes
//     are computed after discounts, on each line's amount less its
//     discount (for amount_off, on the subtotal less the discount), rounded
//     to the nearest minor unit. An exclusive rate adds the tax to the
//     total; an inclusive one states the part of the amount that is tax
//     (amount × rate / (100 + rate)) and adds nothing.
//  4. total = subtotal − discount + exclusive tax.
//  5. The customer balance (negative: credit the customer holds; positive:
//     an amount owed) is the invoice's starting_balance, and amount_due =
//     max(total + starting_balance, 0): credit is applied up to the total,
//     an amount owed is added. When the invoice is charged at once
//     (always_invoice), the balance keeps what is left: the unused credit,
//     plus a negative total.
//
// Rounding is half away from zero, as prorate does.

import "math"

// Coupon is a discount on a customer, as Stripe's coupon: PercentOff (0 to
// 100, up to two decimals) or AmountOff in the currency's minor units.
type Coupon struct {
	PercentOff float64
	AmountOff  int64
}

// TaxRate is a tax rate on a subscription (its default_tax_rates):
// Percentage (up to four decimals), exclusive unless Inclusive.
type TaxRate struct {
	Percentage float64
	Inclusive  bool
}

// invoiceRules are the coupons, tax rates and balances the fake applies to
// invoices.
type invoiceRules struct {
	coupons  map[string]Coupon  // by customer
	balances map[string]int64   // by customer
	taxRates map[string]TaxRate // by subscription
}

func (s *Server) rules() *invoiceRules {
	if s.invoiceRules == nil {
		s.invoiceRules = &invoiceRules{coupons: map[string]Coupon{}, balances: map[string]int64{}, taxRates: map[string]TaxRate{}}
	}
	return s.invoiceRules
}

// SetCustomerDiscount applies coupon to every later invoice of the customer
// (Stripe: a customer's discount); the zero Coupon removes it.
func (s *Server) SetCustomerDiscount(customerID string, coupon Coupon) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if coupon == (Coupon{}) {
		delete(s.rules().coupons, customerID)
		return
	}
	s.rules().coupons[customerID] = coupon
}

// SetCustomerBalance sets the customer's balance in minor units: negative
// is credit the customer holds, positive an amount owed (Stripe's
// customer.balance).
func (s *Server) SetCustomerBalance(customerID string, balance int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules().balances[customerID] = balance
}

// CustomerBalance is the customer's balance now.
func (s *Server) CustomerBalance(customerID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rules().balances[customerID]
}

// SetTaxRate applies rate to every later invoice of the subscription
// (Stripe: the subscription's default_tax_rates); the zero TaxRate removes
// it.
func (s *Server) SetTaxRate(subscriptionID string, rate TaxRate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rate == (TaxRate{}) {
		delete(s.rules().taxRates, subscriptionID)
		return
	}
	s.rules().taxRates[subscriptionID] = rate
}

type discountAmountJSON struct {
	Amount   int64  `json:"amount"`
	Discount string `json:"discount"`
}

type taxRateJSON struct {
	ID         string  `json:"id"`
	Object     string  `json:"object"`
	Percentage float64 `json:"percentage"`
	Inclusive  bool    `json:"inclusive"`
	Active     bool    `json:"active"`
}

type taxAmountJSON struct {
	Amount        int64       `json:"amount"`
	Inclusive     bool        `json:"inclusive"`
	TaxableAmount int64       `json:"taxable_amount"`
	TaxRate       taxRateJSON `json:"tax_rate"`
}

// applyTotals computes inv's totals from its lines for sub under the
// customer's coupon and balance and the subscription's tax rate (see the
// top of this file). Callers hold s.mu.
func (s *Server) applyTotals(sub *Subscription, inv *invoiceJSON) {
	r := s.rules()
	var subtotal int64
	for _, l := range inv.Lines.Data {
		subtotal += l.Amount
	}
	coupon, hasCoupon := r.coupons[sub.Customer]
	rate, hasRate := r.taxRates[sub.ID]

	// Discounts, and the amount each line is taxed on.
	var discount int64
	taxable := make([]int64, len(inv.Lines.Data))
	for i, l := range inv.Lines.Data {
		taxable[i] = l.Amount
		if hasCoupon && coupon.PercentOff > 0 {
			d := percentOf(l.Amount, coupon.PercentOff)
			discount += d
			taxable[i] -= d
		}
	}
	if hasCoupon && coupon.AmountOff > 0 {
		discount = min(coupon.AmountOff, max(subtotal, 0))
		taxable = []int64{subtotal - discount}
	}

	// Tax, after discounts.
	var tax, taxBase int64
	if hasRate {
		for _, amount := range taxable {
			taxBase += amount
			if rate.Inclusive {
				tax += roundHalfAway(float64(amount) * rate.Percentage / (100 + rate.Percentage))
			} else {
				tax += percentOf(amount, rate.Percentage)
			}
		}
	}
	exclusiveTax := tax
	if rate.Inclusive {
		exclusiveTax = 0
	}

	total := subtotal - discount + exclusiveTax
	balance := r.balances[sub.Customer]
	due := max(total+balance, 0)

	inv.Subtotal, inv.SubtotalExcludingTax = subtotal, subtotal
	inv.Total, inv.TotalExcludingTax = total, subtotal-discount
	inv.Tax = exclusiveTax
	inv.StartingBalance = balance
	inv.AmountDue, inv.AmountRemaining = due, due
	inv.TotalDiscountAmounts = []discountAmountJSON{}
	if discount != 0 {
		inv.TotalDiscountAmounts = append(inv.TotalDiscountAmounts, discountAmountJSON{Amount: discount, Discount: "di_" + sub.Customer})
	}
	inv.TotalTaxAmounts = []taxAmountJSON{}
	if hasRate {
		inv.TotalTaxAmounts = append(inv.TotalTaxAmounts, taxAmountJSON{Amount: tax, Inclusive: rate.Inclusive, TaxableAmount: taxBase,
			TaxRate: taxRateJSON{ID: "txr_" + sub.ID, Object: "tax_rate", Percentage: rate.Percentage, Inclusive: rate.Inclusive, Active: true}})
	}
}

// chargeInvoice settles the customer balance for an invoice charged at
// once (an update made with always_invoice: invoiceChange): the credit
// applied leaves the balance, an amount owed is paid with it, and a
// negative total is credited to it. Callers hold s.mu.
func (s *Server) chargeInvoice(sub *Subscription, inv invoiceJSON) {
	r := s.rules()
	// amount_due = max(total + balance, 0) was paid; what is left is credit.
	balance := min(inv.Total+inv.StartingBalance, 0)
	if balance == 0 {
		delete(r.balances, sub.Customer)
		return
	}
	r.balances[sub.Customer] = balance
}

// percentOf is amount × percent / 100, rounded half away from zero.
func percentOf(amount int64, percent float64) int64 {
	return roundHalfAway(float64(amount) * percent / 100)
}

func roundHalfAway(x float64) int64 {
	// Percentages have at most four decimals and amounts are far below
	// 2^53, so a tiny bias settles values that are exact halves in decimal
	// but not in binary (12.5% of 1767 is 220.875).
	if x < 0 {
		return -int64(math.Floor(-x + 0.5 + 1e-9))
	}
	return int64(math.Floor(x + 0.5 + 1e-9))
}
