package mcp

import (
	"context"
	"errors"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/mcp/appview"
)

// MCP Apps (extension io.modelcontextprotocol/ui, spec 2026-01-26; contract
// §7.1): upgrade_plan and downgrade_plan link billingd's own view of the
// proposal (mcp/appview), which the host renders in a sandboxed iframe next
// to the tool result. For a client that advertised the extension, a first
// call's content and structuredContent never hold the token: it travels in
// the result's _meta, which the host hands to the view and keeps from the
// model, so only the person's click on Confirm can make the second call,
// through the app-only tool confirm_plan_change. Every other client gets the
// two-call handshake unchanged.
//
// A client that advertised the extension gets the view rather than an
// elicitation: the view shows billingd's own rendering of the terms, and the
// extension is all that several chat hosts support.

const (
	// appsExtension is the MCP Apps extension's identifier.
	appsExtension = "io.modelcontextprotocol/ui"
	// viewMIMEType is the MIME type of an MCP Apps HTML view.
	viewMIMEType = "text/html;profile=mcp-app"
	// viewURI names billingd's confirmation view.
	viewURI = "ui://billingd/plan-change.html"
	// toolConfirm is the view's second call (app-only).
	toolConfirm = "confirm_plan_change"
	// tokenMetaKey holds the token in a first call's _meta, for the view.
	tokenMetaKey = "billingd/confirm_token"
	// statusMetaKey tells the view, when its second call fails, where the
	// confirmation stood (superseded, cancelled, …).
	statusMetaKey = "billingd/confirmation_status"

	appsInstructions = ` If your client renders MCP Apps (it advertised the io.modelcontextprotocol/ui extension), the first call's result has no confirm_token: ` +
		`billingd shows the user the proposal in its own view, with the exact summary, the amounts, a countdown and Confirm and Cancel buttons, ` +
		`and only the user's click makes the change. Let the user see that view; do not ask the user for a token and do not make the second call yourself. ` +
		`The view reports the outcome to the user.`
)

// supportsApps reports whether the client advertised MCP Apps with HTML views
// at initialize (or, on 2026-07-28, in the request's capabilities).
func supportsApps(caps *sdk.ClientCapabilities) bool {
	if caps == nil {
		return false
	}
	settings, ok := caps.Extensions[appsExtension].(map[string]any)
	if !ok {
		return false
	}
	types, _ := settings["mimeTypes"].([]any)
	return slices.Contains(types, any(viewMIMEType))
}

// appsCapable adds the MCP Apps extension to the server's capabilities.
func appsCapable(c *sdk.ServerCapabilities) *sdk.ServerCapabilities {
	c.AddExtension(appsExtension, map[string]any{"mimeTypes": []string{viewMIMEType}})
	return c
}

// viewToolMeta links a tool to the view: _meta.ui.resourceUri, and the flat
// key of earlier drafts that the official SDK's registerAppTool also sets.
func viewToolMeta() sdk.Meta {
	return sdk.Meta{"ui": map[string]any{"resourceUri": viewURI}, "ui/resourceUri": viewURI}
}

// viewResourceMeta declares what the view needs from the host's sandbox:
// nothing. The empty CSP allow-lists mean no network access of any kind.
func viewResourceMeta() sdk.Meta {
	return sdk.Meta{"ui": map[string]any{
		"csp": map[string]any{
			"connectDomains": []string{}, "resourceDomains": []string{},
			"frameDomains": []string{}, "baseUriDomains": []string{},
		},
		"prefersBorder": true,
	}}
}

// registerView adds the view resource and the app-only second call.
func registerView(s *sdk.Server, t tools) {
	s.AddResource(&sdk.Resource{
		URI: viewURI, Name: "plan-change", Title: "Confirm a plan change", MIMEType: viewMIMEType,
		Description: "billingd's view of a proposed plan change: the summary, the amounts, a countdown, Confirm and Cancel.",
		Meta:        viewResourceMeta(),
	}, func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{
			URI: viewURI, MIMEType: viewMIMEType, Text: appview.HTML, Meta: viewResourceMeta(),
		}}}, nil
	})
	addInteractiveTool(s, &sdk.Tool{
		Name:  toolConfirm,
		Title: "Confirm a plan change (from billingd's view)",
		Description: "The second call of upgrade_plan, downgrade_plan or change_seats, made by billingd's MCP Apps view when the user presses Confirm. " +
			"Hosts hide this tool from the model (visibility app): an agent never calls it.",
		Annotations: planChangeAnnotations("Confirm a plan change"),
		Meta:        sdk.Meta{"ui": map[string]any{"resourceUri": viewURI, "visibility": []string{"app"}}},
	}, t.log, t.confirmFromView)
}

// confirmArgs are the arguments of confirm_plan_change.
type confirmArgs struct {
	ConfirmationID string `json:"confirmation_id" jsonschema:"The confirmation_id of the first call's result."`
	ConfirmToken   string `json:"confirm_token" jsonschema:"The token from the first call's _meta."`
}

// confirmFromView is confirm_plan_change: the second call of the
// confirmation's own operation and plan, read through the service, so that
// the view needs to hold only what the first call gave it.
//
// Only a client that declared it renders MCP Apps (at initialize, or on
// 2026-07-28 in the request) has a view to press Confirm in, so only such a
// client may call it; any other gets a tool error before anything is looked
// up, and its token stays as it was. What billingd sees is the host's call,
// not the click, and the result says no more than that.
func (t tools) confirmFromView(ctx context.Context, req *sdk.CallToolRequest, caller billing.Caller, in confirmArgs) (reply[changeOutput], error) {
	if !supportsApps(declared(req).caps) {
		t.log.WarnContext(ctx, "app-only tool called by a client without MCP Apps", callAttrs(toolConfirm, caller, "no_view")...)
		return reply[changeOutput]{}, billing.Errorf(billing.CodeInvalidRequest,
			"confirm_plan_change is called by billingd's own view, and this client did not declare that it renders MCP Apps "+
				"(io.modelcontextprotocol/ui); this call changed nothing. Make the second call with the first call's tool "+
				"and the confirm_token, once the user has agreed to the summary")
	}
	change, err := t.svc.ChangeOf(ctx, caller, in.ConfirmationID)
	if err != nil {
		return reply[changeOutput]{}, err
	}
	second := change.Request
	second.ConfirmToken = in.ConfirmToken
	caller.Consent = billing.ConsentMCPAppView // the person pressed Confirm in billingd's view
	res, err := t.handshake(ctx, caller, second)
	if err != nil {
		return reply[changeOutput]{}, errWithMeta{err: err, meta: sdk.Meta{statusMetaKey: string(change.Status)}}
	}
	return final(changeOutput{ChangeResult: res}, changeText(res)+
		" Made with confirm_plan_change, the call billingd's view makes when its Confirm button is pressed (billingd sees the host's call, not the click)."), nil
}

// forView is a first call's proposal for a client that renders the view:
// the token moves from structuredContent to _meta.
func forView(res billing.ChangeResult) reply[changeOutput] {
	token := res.ConfirmToken
	res.ConfirmToken = ""
	text := res.Summary + "\n\nbillingd shows the user this proposal in its own view, with Confirm and Cancel buttons; " +
		"only the user's click makes the change (confirmation " + res.ConfirmationID + "). " +
		"Do not ask the user for a token and do not call this tool again for this change."
	return reply[changeOutput]{out: changeOutput{ChangeResult: res}, text: text, meta: sdk.Meta{tokenMetaKey: token}}
}

// errWithMeta is a tool failure that also tells the view something in the
// result's _meta; its code and public message are err's.
type errWithMeta struct {
	err  error
	meta sdk.Meta
}

func (e errWithMeta) Error() string { return e.err.Error() }
func (e errWithMeta) Unwrap() error { return e.err }

// failureMeta is the _meta of a failed call, if err carries one.
func failureMeta(err error) sdk.Meta {
	var m errWithMeta
	if errors.As(err, &m) {
		return m.meta
	}
	return nil
}
