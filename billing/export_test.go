package billing

// The external test package (billing_test, which can use billingtest's fakes
// without an import cycle) checks tokens and confirmation ids with these.
var (
	NewToken                 = newToken
	HashToken                = hashToken
	WellFormedToken          = wellFormedToken
	WellFormedConfirmationID = wellFormedConfirmationID
)
