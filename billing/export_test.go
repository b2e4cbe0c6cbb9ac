package billing

// The external test package (billing_test, which can use billingtest's fakes
// without an import cycle) checks tokens and error codes
// with these.
var (
	NewToken        = newToken
	HashToken       = hashToken
	WellFormedToken = wellFormedToken
	WantCode        = wantCode // one error-code assertion for both test packages
)
