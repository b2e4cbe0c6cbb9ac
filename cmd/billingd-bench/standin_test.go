package main

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The canned stand-in's hand-appended subscription is the JSON the map it
// replaced encoded to.
func TestCannedSubscription(t *testing.T) {
	want := map[string]any{
		"id": "sub_\"1", "object": "subscription", "status": "active", "current_period_end": float64(1700000000),
		"items": map[string]any{"object": "list", "has_more": false, "data": []any{map[string]any{
			"id": "si_1", "object": "subscription_item", "quantity": float64(1), "price": map[string]any{"id": "price_x", "object": "price"},
		}}},
	}
	var got map[string]any
	if err := json.Unmarshal(cannedSubscription("sub_\"1", "si_1", "price_x", 1700000000), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}
