package billing

import (
	"context"
	"errors"
)

// PendingChange is what a confirmation asked for: the second call that
// redeems it lacks only the token. Status says where the confirmation
// stands, so that a client can tell the person why a token stopped working.
type PendingChange struct {
	Request ChangeRequest
	Status  Status
}

// ChangeOf reads the caller's own confirmation id: the operation and plan a
// second call must name to redeem it. A client that holds only the
// confirmation id and the token (the MCP Apps view, whose Confirm button
// makes the second call) makes the second call with it through ChangePlan,
// where every rule applies. A confirmation of anyone else, or an unknown id,
// is consent_token_invalid, exactly like an unknown token: nothing about it
// is revealed.
func (s *Service) ChangeOf(ctx context.Context, caller Caller, id string) (PendingChange, error) {
	if !WellFormedConfirmationID(id) {
		return PendingChange{}, errNotYours()
	}
	var c Confirmation
	err := s.store.InTx(ctx, func(tx Tx) (err error) {
		c, _, err = tx.LockByID(ctx, caller.Org, id)
		return err
	})
	switch {
	case errors.Is(err, ErrNotFound) || err == nil && c.Principal != caller.Principal:
		return PendingChange{}, errNotYours()
	case err != nil:
		return PendingChange{}, storeError("read confirmation", err)
	}
	return PendingChange{Request: requestOf(c), Status: c.Status}, nil
}

// errNotYours answers a confirmation id the caller cannot redeem in the words
// of an unknown token.
func errNotYours() *Error {
	return Errorf(CodeTokenInvalid, "the confirmation token is not valid: start again with a first call")
}
