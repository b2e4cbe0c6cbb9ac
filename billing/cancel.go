package billing

import (
	"context"
	"errors"
	"fmt"
)

// CancelResult is the body of a successful cancel.
type CancelResult struct {
	ID     string `json:"id"`
	Status Status `json:"status"`
}

// Cancel voids a pending confirmation of the caller's (an admin may cancel
// any of the org's). Cancelling a cancelled confirmation succeeds again;
// another principal's confirmation is not found.
func (s *Service) Cancel(ctx context.Context, caller Caller, id string) (CancelResult, error) {
	if !WellFormedConfirmationID(id) {
		return CancelResult{}, Errorf(CodeNotFound, "confirmation not found")
	}
	var outcome error
	err := s.store.InTx(ctx, func(tx Tx) error {
		c, _, err := tx.LockByID(ctx, caller.Org, id)
		if errors.Is(err, ErrNotFound) || err == nil && c.Principal != caller.Principal && !caller.Admin {
			outcome = Errorf(CodeNotFound, "confirmation not found")
			return nil
		}
		if err != nil {
			return fmt.Errorf("lock confirmation: %w", err)
		}
		switch c.Status {
		case StatusCancelled:
			return nil
		case StatusPending:
			return tx.Record(ctx, Record{ConfirmationID: c.ID, Status: StatusCancelled,
				Events: []AuditEvent{s.event(caller, c.Operation, EventTokenRevoked, c.ID, "cancelled")}})
		default:
			outcome = Errorf(CodeTokenInvalid, "the confirmation is no longer pending")
			return nil
		}
	})
	if err != nil {
		return CancelResult{}, storeError("cancel confirmation", err)
	}
	if outcome != nil {
		return CancelResult{}, outcome
	}
	return CancelResult{ID: id, Status: StatusCancelled}, nil
}
