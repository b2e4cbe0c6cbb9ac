package stripepaytest

import (
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Stripe's form encoding nests with brackets: items[0][price]=p,
// metadata[org_id]=o, subscription_details[items][0][id]=si. These helpers
// read the few shapes billingd sends.

// itemParam is one entry of an items list.
type itemParam struct {
	id          string
	price       string
	quantity    int64
	hasQuantity bool
}

// parseItems reads the list under prefix ("items",
// "subscription_details[items]"), in index order.
func parseItems(form url.Values, prefix string) ([]itemParam, error) {
	entries, err := listParams(form, prefix)
	if err != nil {
		return nil, err
	}
	items := make([]itemParam, len(entries))
	for i, fields := range entries {
		param := func(name string) string { return prefix + "[" + strconv.Itoa(i) + "][" + name + "]" }
		for name, value := range fields {
			switch name {
			case "id":
				items[i].id = value
			case "price":
				items[i].price = value
			case "quantity":
				q, err := strconv.ParseInt(value, 10, 64)
				if err != nil || q < 0 {
					return nil, errParamInvalid(param(name), "Invalid integer: %s", value)
				}
				items[i].quantity, items[i].hasQuantity = q, true
			default:
				return nil, errParamInvalid(param(name), "the Stripe fake does not support %s", param(name))
			}
		}
	}
	return items, nil
}

// listParams groups the fields of a form list by index: for prefix "items",
// items[0][price]=p&items[0][quantity]=2&items[1][price]=q gives
// [{price: p, quantity: 2}, {price: q}].
func listParams(form url.Values, prefix string) ([]map[string]string, error) {
	byIndex := map[int]map[string]string{}
	for key, values := range form {
		rest, ok := strings.CutPrefix(key, prefix+"[")
		if !ok {
			continue
		}
		index, field, ok := strings.Cut(rest, "][")
		field, closed := strings.CutSuffix(field, "]")
		i, err := strconv.Atoi(index)
		if !ok || !closed || err != nil || i < 0 || field == "" {
			return nil, errParamInvalid(key, "Invalid array parameter: %s", key)
		}
		if byIndex[i] == nil {
			byIndex[i] = map[string]string{}
		}
		byIndex[i][field] = values[0]
	}
	entries := make([]map[string]string, 0, len(byIndex))
	for _, i := range slices.Sorted(maps.Keys(byIndex)) {
		entries = append(entries, byIndex[i])
	}
	return entries, nil
}

// hashParams reads a hash such as metadata[org_id]=o under prefix.
func hashParams(form url.Values, prefix string) map[string]string {
	m := map[string]string{}
	for key, values := range form {
		rest, ok := strings.CutPrefix(key, prefix+"[")
		if !ok {
			continue
		}
		if name, ok := strings.CutSuffix(rest, "]"); ok && name != "" {
			m[name] = values[0]
		}
	}
	return m
}

// intParam reads an optional integer parameter.
func intParam(form url.Values, name string) (n int64, ok bool, err error) {
	v := form.Get(name)
	if v == "" {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, errParamInvalid(name, "Invalid integer: %s", v)
	}
	return n, true, nil
}

// enumParam reads an optional parameter that must be one of allowed; absent
// gives def.
func enumParam(form url.Values, name, def string, allowed ...string) (string, error) {
	v := form.Get(name)
	if v == "" {
		return def, nil
	}
	if !slices.Contains(allowed, v) {
		return "", errParamInvalid(name, "Invalid %s: must be one of %s", name, strings.Join(allowed, ", "))
	}
	return v, nil
}

// boolParam reads an optional boolean parameter ("true" or "false", as
// stripe-go writes them); absent gives def, and set reports whether it was
// given.
func boolParam(form url.Values, name string, def bool) (v, set bool, err error) {
	switch form.Get(name) {
	case "":
		return def, false, nil
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, false, errParamInvalid(name, "Invalid boolean: %s", form.Get(name))
}
