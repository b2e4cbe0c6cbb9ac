package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/billingd/billingd/billing"
)

// Limits of an org's endpoints.
const (
	MaxEndpoints  = 20
	maxURLLength  = 2048
	RotationGrace = 24 * time.Hour // the previous secret signs this long after a rotation
	recentPerList = 10
)

// Endpoints manages an org's webhook endpoints: every rule of what may be
// registered lives here, the transports only decode and encode.
//
// Endpoints are how people learn that a change waits for them, so
// creating, rotating or deleting one is a person's act (contract §4):
// billing's rule of who is a person (People) refuses it to an agent,
// whatever its scopes. Listing is reading: the list never shows a
// credential (Listed).
type Endpoints struct {
	Store  Store
	Guard  Guard
	People People
}

// People is billing's one rule of who may loosen the gate
// (*billing.Service); nil refuses everyone.
type People interface {
	RequirePerson(ctx context.Context, caller billing.Caller, act billing.Act) error
}

// requirePerson checks billing:admin, then that the caller is a person.
func (s *Endpoints) requirePerson(ctx context.Context, caller billing.Caller) error {
	if err := requireAdmin(caller); err != nil {
		return err
	}
	if s.People == nil {
		return billing.Errorf(billing.CodeOperationDenied, "webhook endpoints cannot be managed on this server")
	}
	return s.People.RequirePerson(ctx, caller, billing.ActManageWebhooks)
}

// CreateRequest is the body of POST /api/billing/webhook-endpoints.
type CreateRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Format string   `json:"format,omitempty"`
}

// Create registers an endpoint and returns it with its secret, the only
// time the secret is shown.
func (s *Endpoints) Create(ctx context.Context, caller billing.Caller, req CreateRequest) (Endpoint, error) {
	if err := s.requirePerson(ctx, caller); err != nil {
		return Endpoint{}, err
	}
	e, err := s.validate(ctx, req)
	if err != nil {
		return Endpoint{}, err
	}
	existing, err := s.Store.Endpoints(ctx, caller.Org, 0)
	if err != nil {
		return Endpoint{}, fmt.Errorf("list webhook endpoints: %w", err)
	}
	if len(existing) >= MaxEndpoints {
		return Endpoint{}, billing.Errorf(billing.CodeInvalidRequest, "an org may have at most %d webhook endpoints", MaxEndpoints)
	}
	e.ID, e.Org, e.CreatedBy, e.Secret = newEndpointID(), caller.Org, caller.Principal, NewSecret()
	created, err := s.Store.CreateEndpoint(ctx, e)
	if err != nil {
		return Endpoint{}, fmt.Errorf("create webhook endpoint: %w", err)
	}
	return created, nil
}

// validate checks a request and returns the endpoint it describes.
func (s *Endpoints) validate(ctx context.Context, req CreateRequest) (Endpoint, error) {
	invalid := func(msg string) error { return billing.Errorf(billing.CodeInvalidRequest, "%s", msg) }
	if req.URL == "" || len(req.URL) > maxURLLength {
		return Endpoint{}, invalid("url is required (at most 2048 characters)")
	}
	if len(req.Events) == 0 {
		return Endpoint{}, invalid("events must name at least one event type")
	}
	var events []string
	for _, t := range req.Events {
		if !KnownEventType(t) {
			return Endpoint{}, invalid("events holds an unknown event type; known: approval.requested, approval.granted, " +
				"approval.rejected, approval.expired, verification.requested, change.executed, change.scheduled, change.failed, mandate.used")
		}
		if !slices.Contains(events, t) {
			events = append(events, t)
		}
	}
	format := req.Format
	switch format {
	case "":
		format = FormatStandard
	case FormatStandard, FormatSlack:
	default:
		return Endpoint{}, invalid(`format must be "standard" or "slack"`)
	}
	if err := s.Guard.CheckURL(ctx, req.URL); err != nil {
		if errors.Is(err, ErrRefusedAddress) {
			return Endpoint{}, invalid("url must resolve to public addresses only")
		}
		return Endpoint{}, &billing.Error{Code: billing.CodeInvalidRequest,
			Message: "url must be an absolute https URL whose host resolves", Err: err}
	}
	return Endpoint{URL: req.URL, Events: events, Format: format}, nil
}

// List returns the org's endpoints, as Listed (no secret, no credential in
// a URL), each with its recent deliveries.
func (s *Endpoints) List(ctx context.Context, caller billing.Caller) ([]Endpoint, error) {
	if err := requireAdmin(caller); err != nil {
		return nil, err
	}
	es, err := s.Store.Endpoints(ctx, caller.Org, recentPerList)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	for i := range es {
		es[i] = es[i].Listed()
	}
	return es, nil
}

// Delete removes an endpoint with its deliveries.
func (s *Endpoints) Delete(ctx context.Context, caller billing.Caller, id string) error {
	if err := s.requirePerson(ctx, caller); err != nil {
		return err
	}
	err := s.Store.DeleteEndpoint(ctx, caller.Org, id)
	if errors.Is(err, billing.ErrNotFound) {
		return billing.Errorf(billing.CodeNotFound, "webhook endpoint not found")
	}
	if err != nil {
		return fmt.Errorf("delete webhook endpoint: %w", err)
	}
	return nil
}

// RotateSecret gives an endpoint a new secret, shown once; the previous one
// keeps signing (a second signature) for RotationGrace, so that receivers
// can switch without losing a delivery.
func (s *Endpoints) RotateSecret(ctx context.Context, caller billing.Caller, id string) (Endpoint, error) {
	if err := s.requirePerson(ctx, caller); err != nil {
		return Endpoint{}, err
	}
	e, err := s.Store.RotateSecret(ctx, caller.Org, id, NewSecret(), RotationGrace)
	if errors.Is(err, billing.ErrNotFound) {
		return Endpoint{}, billing.Errorf(billing.CodeNotFound, "webhook endpoint not found")
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("rotate webhook secret: %w", err)
	}
	listed := e.Listed()
	listed.Secret = e.Secret // shown once, to the person who rotated it
	return listed, nil
}

func requireAdmin(caller billing.Caller) error {
	if !caller.Admin {
		return billing.Errorf(billing.CodeInsufficientScope, "webhook endpoints need billing:admin")
	}
	return nil
}

func newEndpointID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "we_" + hex.EncodeToString(b)
}

// slackHost reports whether host is Slack's (hooks.slack.com, GovSlack's
// hooks.slack-gov.com, or any other host of theirs), however it is
// spelled: a host name is case-insensitive and "hooks.slack.com." (the
// fully qualified form, trailing dot) names the same host. Its
// incoming-webhook URLs carry their credential in the path whatever
// format the endpoint was registered with.
func slackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, domain := range []string{"slack.com", "slack-gov.com"} {
		if host == domain || strings.HasSuffix(host, "."+domain) {
			return true
		}
	}
	return false
}

// Listed is e as lists show it: no secret, and no credential in its URL.
// A Slack incoming-webhook URL's path is its secret (whoever holds it
// posts into the channel), so it is shown as its origin and /services/…;
// a query string often carries a token, so it is shown as ?…. Only the
// answer that creates an endpoint shows the URL as the person entered it.
func (e Endpoint) Listed() Endpoint {
	e.Secret = ""
	u, err := url.Parse(e.URL)
	if err != nil || u.Host == "" {
		e.URL = "…"
		return e
	}
	origin := u.Scheme + "://" + u.Host
	switch {
	case e.Format == FormatSlack || slackHost(u.Hostname()):
		e.URL = origin + "/…"
		if strings.HasPrefix(u.Path, "/services/") {
			e.URL = origin + "/services/…"
		}
	case u.RawQuery != "" || u.ForceQuery:
		e.URL = origin + u.EscapedPath() + "?…"
	default:
		e.URL = origin + u.EscapedPath()
	}
	return e
}
