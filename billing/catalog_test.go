package billing

import (
	"slices"
	"strings"
	"testing"
)

func plansWith(edit func([]Plan) []Plan) []Plan { return edit(DefaultPlans()) }

func TestNewCatalogOrdersByPrice(t *testing.T) {
	tests := []struct {
		name  string
		plans []Plan
		want  []string
	}{
		{"default", DefaultPlans(), []string{"free", "pro", "scale"}},
		{"reversed", plansWith(func(p []Plan) []Plan { slices.Reverse(p); return p }), []string{"free", "pro", "scale"}},
		{"shuffled", plansWith(func(p []Plan) []Plan { return []Plan{p[1], p[2], p[0]} }), []string{"free", "pro", "scale"}},
		{"single", plansWith(func(p []Plan) []Plan { return p[1:2] }), []string{"pro"}},
		{"yearly and monthly mixed", plansWith(func(p []Plan) []Plan { p[2].Interval = "year"; return p }), []string{"free", "pro", "scale"}},
		{"upper-case currency shared", plansWith(func(p []Plan) []Plan {
			for i := range p {
				p[i].Currency = "USD"
			}
			return p
		}), []string{"free", "pro", "scale"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := slices.Clone(tt.plans)
			c, err := NewCatalog(tt.plans)
			if err != nil {
				t.Fatalf("NewCatalog: %v", err)
			}
			var ids []string
			for _, p := range c.Plans() {
				ids = append(ids, p.ID)
			}
			if !slices.Equal(ids, tt.want) {
				t.Errorf("order = %v, want %v", ids, tt.want)
			}
			for i, id := range tt.want {
				if got := c.rank(id); got != i {
					t.Errorf("rank(%s) = %d, want %d", id, got, i)
				}
				if p, ok := c.Plan(id); !ok || p.ID != id {
					t.Errorf("Plan(%s) = %+v, %v", id, p, ok)
				}
			}
			if !slices.Equal(tt.plans, input) {
				t.Error("NewCatalog reordered its argument")
			}
		})
	}
}

func TestCatalogLookups(t *testing.T) {
	c := testCatalog(t, DefaultPlans())
	if _, ok := c.Plan("enterprise"); ok {
		t.Error("Plan(enterprise) found")
	}
	if _, ok := c.Plan(""); ok {
		t.Error("Plan(\"\") found")
	}
	if got := c.rank("enterprise"); got != -1 {
		t.Errorf("rank(enterprise) = %d, want -1", got)
	}
	plans := c.Plans()
	plans[0].ID = "changed"
	if p, _ := c.Plan("free"); p.ID != "free" || c.Plans()[0].ID != "free" {
		t.Error("Plans returned the catalog's own slice")
	}
}

func TestNewCatalogRejects(t *testing.T) {
	tests := []struct {
		name    string
		plans   []Plan
		wantErr string // a part of the error message
	}{
		{"nil", nil, "empty"},
		{"empty", []Plan{}, "empty"},
		{"duplicate id", plansWith(func(p []Plan) []Plan { p[2].ID = "pro"; return p }), "duplicate"},
		{"missing id", plansWith(func(p []Plan) []Plan { p[1].ID = ""; return p }), "required"},
		{"missing name", plansWith(func(p []Plan) []Plan { p[1].Name = ""; return p }), "required"},
		{"missing price id", plansWith(func(p []Plan) []Plan { p[2].StripePriceID = ""; return p }), "required"},
		{"negative amount", plansWith(func(p []Plan) []Plan { p[0].AmountCents = -1; return p }), "negative"},
		{"mixed currencies", plansWith(func(p []Plan) []Plan { p[2].Currency = "eur"; return p }), "currency"},
		{"mixed currencies in the cheapest", plansWith(func(p []Plan) []Plan { p[0].Currency = "eur"; return p }), "currency"},
		{"bad interval", plansWith(func(p []Plan) []Plan { p[1].Interval = "week"; return p }), "interval"},
		{"empty interval", plansWith(func(p []Plan) []Plan { p[1].Interval = ""; return p }), "interval"},
		{"interval case", plansWith(func(p []Plan) []Plan { p[1].Interval = "Month"; return p }), "interval"},
		{"equal prices", plansWith(func(p []Plan) []Plan { p[2].AmountCents = 1900; return p }), "same price"},
		{"kwd price not in tens of fils", plansWith(func(p []Plan) []Plan {
			for i := range p {
				p[i].Currency, p[i].AmountCents = "kwd", p[i].AmountCents*10
			}
			p[2].AmountCents = 49005
			return p
		}), "end in 0"},
		{"equal zero prices", plansWith(func(p []Plan) []Plan { p[1].AmountCents = 0; return p }), "same price"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewCatalog(tt.plans)
			if err == nil {
				t.Fatal("NewCatalog accepted the plans")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
}

// TestNewCatalogRequiresCurrency: a catalog whose plans lack a currency is
// refused (its prices would read "19 /mo").
func TestNewCatalogRequiresCurrency(t *testing.T) {
	_, err := NewCatalog(plansWith(func(p []Plan) []Plan {
		for i := range p {
			p[i].Currency = ""
		}
		return p
	}))
	if err == nil {
		t.Error("NewCatalog accepted plans without a currency")
	}
}
