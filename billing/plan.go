package billing

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

var currencyPattern = regexp.MustCompile(`^[a-z]{3}$`)

// Plan is one entry of the plan catalog.
type Plan struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	AmountCents   int64  `json:"amount_cents"`
	Currency      string `json:"currency"`
	Interval      string `json:"interval"`
	StripePriceID string `json:"stripe_price_id"`
}

// Catalog is the ordered set of plans. Plans are ordered by price: an upgrade
// goes to a more expensive plan, a downgrade to a cheaper one.
type Catalog struct {
	plans []Plan
}

// DefaultPlans is the catalog of contract §5. The Stripe price ids are the
// ones billingd dev seeds; a deployment maps its own with PLANS_FILE.
func DefaultPlans() []Plan {
	return []Plan{
		{ID: "free", Name: "Free", AmountCents: 0, Currency: "usd", Interval: "month", StripePriceID: "price_billingd_free"},
		{ID: "pro", Name: "Pro", AmountCents: 1900, Currency: "usd", Interval: "month", StripePriceID: "price_billingd_pro"},
		{ID: "scale", Name: "Scale", AmountCents: 4900, Currency: "usd", Interval: "month", StripePriceID: "price_billingd_scale"},
	}
}

// NewCatalog validates plans and orders them by price. Plans must have unique
// ids and prices, one currency and a known interval, so that "up" and "down"
// are well defined.
func NewCatalog(plans []Plan) (Catalog, error) {
	if len(plans) == 0 {
		return Catalog{}, fmt.Errorf("catalog is empty")
	}
	sorted := append([]Plan(nil), plans...)
	for i := range sorted {
		// Stripe reports currencies in lower case; compare them that way.
		sorted[i].Currency = strings.ToLower(sorted[i].Currency)
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].AmountCents < sorted[j].AmountCents })
	ids := map[string]bool{}
	for i, p := range sorted {
		switch {
		case p.ID == "" || p.Name == "" || p.StripePriceID == "":
			return Catalog{}, fmt.Errorf("plan %d: id, name and stripe_price_id are required", i)
		case !currencyPattern.MatchString(p.Currency):
			return Catalog{}, fmt.Errorf("plan %q: currency must be a three-letter ISO code", p.ID)
		case ids[p.ID]:
			return Catalog{}, fmt.Errorf("plan %q: duplicate id", p.ID)
		case p.AmountCents < 0:
			return Catalog{}, fmt.Errorf("plan %q: negative amount", p.ID)
		case DigitsOf(p.Currency).Exponent == 3 && p.AmountCents%10 != 0:
			// Stripe refuses a three-decimal amount whose last digit is not 0.
			return Catalog{}, fmt.Errorf("plan %q: Stripe counts %s in thousandths and takes only amounts that end in 0", p.ID, strings.ToUpper(p.Currency))
		case p.Currency != sorted[0].Currency:
			return Catalog{}, fmt.Errorf("plan %q: all plans must share one currency", p.ID)
		case p.Interval != "month" && p.Interval != "year":
			return Catalog{}, fmt.Errorf("plan %q: interval must be month or year", p.ID)
		case i > 0 && p.AmountCents == sorted[i-1].AmountCents:
			return Catalog{}, fmt.Errorf("plan %q: same price as %q, so neither is an upgrade of the other", p.ID, sorted[i-1].ID)
		}
		ids[p.ID] = true
	}
	return Catalog{plans: sorted}, nil
}

// Plans returns the plans, cheapest first.
func (c Catalog) Plans() []Plan { return append([]Plan(nil), c.plans...) }

// Plan returns the plan with the given id.
func (c Catalog) Plan(id string) (Plan, bool) {
	for _, p := range c.plans {
		if p.ID == id {
			return p, true
		}
	}
	return Plan{}, false
}

// rank is the plan's position in price order; -1 if unknown.
func (c Catalog) rank(id string) int {
	for i, p := range c.plans {
		if p.ID == id {
			return i
		}
	}
	return -1
}

// planByPrice returns the plan billed with the given provider price.
func (c Catalog) planByPrice(priceID string) (Plan, bool) {
	for _, p := range c.plans {
		if p.StripePriceID == priceID {
			return p, true
		}
	}
	return Plan{}, false
}

// seats is a quantity as billingd counts seats: one at least (a copy or a
// confirmation stored before seats were counted has none).
func seats(quantity int64) int64 { return max(quantity, 1) }
