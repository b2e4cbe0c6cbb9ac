package billing

import "context"

// ownInvoice is the invoice the provider made for c's upgrade, which the
// subscription's latest invoice (found, when invoiceOf took it) may not
// be: a renewal may have come after. It is looked for among the
// subscription's invoices since c's recovery point; nil when it cannot be
// identified, and the amount invoiced is then unknown.
func (s *Service) ownInvoice(ctx context.Context, c Confirmation, subscriptionID string, found *Invoice) *Invoice {
	if found != nil || !invoicesNow(c) || c.AttemptedAt.IsZero() {
		return found
	}
	ctx, cancel := context.WithTimeout(ctx, s.execTimeout)
	defer cancel()
	invoices, err := s.payments.SubscriptionInvoices(ctx, subscriptionID, c.AttemptedAt.Add(-invoiceSkew))
	if err != nil {
		s.log.WarnContext(ctx, "the change's own invoice was not found: amount invoiced unknown", "confirmation_id", c.ID, "err", err)
		return nil
	}
	for i := range invoices {
		if inv := invoiceOf(&invoices[i], c); inv != nil {
			return inv
		}
	}
	return nil
}

// chargesNow reports whether c's change is invoiced at once: an upgrade
// made now, not one that only keeps the plan.
func chargesNow(c Confirmation) bool {
	return c.Terms.chargesNow()
}
