package billing

// Links that outbound notifications (internal/webhooks) carry, so that a
// person reading one can act: the pages are the service's, and so are
// their addresses.

// ApprovalURL is the page where an approver sees and decides confirmation id.
func (s *Service) ApprovalURL(id string) string { return s.approvalURL(id) }

// VerifyURL is the page where the requester signs in again to confirm id.
func (s *Service) VerifyURL(id string) string { return s.verifyURL(id) }
