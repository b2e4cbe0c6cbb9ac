// billingd dashboard: the plan (and a change scheduled for the period's
// end, which the person can keep from happening), the catalog with the
// two-call handshake in a dialog, pending confirmations, pending approvals
// (for admins) and the audit log. common.js, loaded first, has the API client, sign-in and the
// rule that server data is only ever written as text.
"use strict";

const state = {
  subscription: null,
  plans: [],
  // The proposal shown in the confirmation dialog:
  // {op, plan, body, proposal, deadline, focusKey, settled, busy, timer}.
  pending: null,
  // Ticks the countdowns of the pending approvals list while it has rows.
  approvalsTimer: null,
};

// ---- Formatting ----------------------------------------------------------------

function planName(id) {
  const plan = state.plans.find((p) => p.id === id);
  return plan ? plan.name : id;
}

// rerender replaces a container's children and keeps keyboard focus: if a
// control inside had focus, its replacement (same data-focus-key) gets it,
// else the fallback heading does, never the page body.
function rerender(container, children, fallback) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset.focusKey : null;
  container.replaceChildren(...children);
  if (key !== null) {
    refocus(key, fallback);
  }
}

// refocus gives the focus to the control with data-focus-key key, or to
// fallback when it is gone.
function refocus(key, fallback) {
  const again = document.querySelector(`[data-focus-key="${CSS.escape(key || "")}"]`);
  // A control that is now hidden (Keep, once nothing is scheduled) cannot
  // take the focus: the fallback does.
  (again && !again.closest("[hidden]") ? again : fallback).focus();
}

// ---- Loading ----------------------------------------------------------------

// refresh reloads everything the page shows; false when the token was
// refused.
async function refresh() {
  const [sub, plans, pending, who] = await Promise.all([
    api("GET", "/api/billing/subscription"),
    api("GET", "/api/billing/plans"),
    api("GET", "/api/billing/confirmations"),
    // The scopes of this sign-in: only billing:admin may read the audit log.
    api("GET", "/auth/session"),
  ]);
  if (tokenRefused([sub, plans, pending])) {
    return false;
  }
  const admin = isAdmin(who);
  const [audit, hooks] = admin
    ? await Promise.all([api("GET", "/api/billing/audit?limit=50"), api("GET", "/api/billing/webhook-endpoints")])
    : [null, null];
  if (audit && tokenRefused([audit, hooks])) {
    return false;
  }
  showSignedIn(true);
  for (const res of [sub, plans, pending]) {
    if (!res.ok) {
      fail(describeError(res));
    }
  }
  state.subscription = sub.ok ? sub.data : null;
  state.plans = plans.ok ? plans.data.plans : [];
  renderSubscription();
  renderPlans();
  renderPending(pending.ok ? pending.data.confirmations : []);
  // Only billing:admin sees the org's approvals and audit log.
  renderApprovals(admin && pending.ok ? pending : null);
  renderAudit(audit && audit.ok ? audit.data.events : null);
  renderWebhooks(hooks && hooks.ok ? hooks.data.webhook_endpoints : null);
  if (audit && !audit.ok) {
    fail(describeError(audit));
  }
  return true;
}

function clearPage() {
  for (const id of ["plans", "pending", "approvals-list", "audit-events", "receipt-claims", "webhook-deliveries"]) {
    $(id).replaceChildren();
  }
  $("receipt").hidden = true;
  $("scheduled").hidden = true;
  stopApprovalsTimer();
}

function renderSubscription() {
  const sub = state.subscription || {};
  $("sub-org").textContent = sub.org || "—";
  $("sub-plan").textContent = sub.plan ? planName(sub.plan) : "—";
  $("sub-seats").textContent = sub.quantity ? String(sub.quantity) : "—";
  if (sub.quantity && document.activeElement !== $("seats-quantity")) {
    $("seats-quantity").value = String(sub.quantity);
  }
  $("sub-status").textContent = sub.status || "—";
  $("sub-period-end").textContent = sub.current_period_end ? when(sub.current_period_end) : "—";
  // A cancellation: pending at the period's end (with Resume), or made.
  const ended = sub.status === "canceled", ending = !ended && Boolean(sub.cancel_at_period_end);
  $("ending").hidden = !ended && !ending;
  $("resume").hidden = !ending;
  $("ending-text").textContent = ended ? "Cancelled: access has ended, and the subscription can no longer be changed."
    : ending ? `Cancelled at the end of the period: it ends on ${day(sub.current_period_end)} unless resumed.` : "";
  $("cancel-actions").hidden = ended;
  $("cancel-period-end").hidden = ending;
  $("seats-form").hidden = ended;
  // A downgrade scheduled for the period's end: what it becomes and when,
  // and the button that starts the handshake to keep the current plan.
  const change = sub.scheduled_change;
  $("scheduled").hidden = !change;
  if (change) {
    const current = planName(sub.plan);
    const to = scheduledTo(change);
    $("scheduled-text").textContent = `Changes to ${to} on ${day(change.at)}.`;
    $("keep-plan").textContent = `Keep ${current}`;
    $("keep-plan").setAttribute("aria-label", `Keep ${current}: cancel the change to ${to} scheduled for ${day(change.at)}`);
  }
}

// scheduledTo names what a scheduled change changes to: its plan, with its
// seats when it changes them ("Pro with 2 seats").
function scheduledTo(change) {
  const seats = change.quantity ? ` with ${change.quantity === 1 ? "1 seat" : change.quantity + " seats"}` : "";
  return planName(change.to) + seats;
}

function renderPlans() {
  const current = state.plans.find((p) => state.subscription && p.id === state.subscription.plan);
  const rows = state.plans.map((plan) => {
    const row = el("tr");
    row.append(el("th", plan.name, { scope: "row" }), el("td", `${money(plan.amount_cents, plan.currency, plan)} / ${plan.interval}`));
    const cell = el("td");
    if (current && plan.id === current.id) {
      cell.append(el("span", "Current plan", { class: "current" }));
    } else if (current && plan.amount_cents !== current.amount_cents) {
      // Plans are ordered by price: a dearer plan is an upgrade.
      const op = plan.amount_cents > current.amount_cents ? "upgrade" : "downgrade";
      const label = `${op === "upgrade" ? "Upgrade" : "Downgrade"} to ${plan.name}`;
      const button = el("button", label, { type: "button", "data-focus-key": "plan:" + plan.id });
      if (op === "downgrade") {
        // A downgrade happens now or at the period's end: the choice is
        // sent as "at" and quoted in the summary.
        const at = el("select", null, {
          class: "when",
          "data-focus-key": "when:" + plan.id,
          "aria-label": `When the downgrade to ${plan.name} takes effect`,
        });
        at.append(el("option", "now", { value: "now" }), el("option", "at the end of the period", { value: "period_end" }));
        button.addEventListener("click", () => propose(op, plan, button, at.value));
        cell.append(button, at);
      } else {
        button.addEventListener("click", () => propose(op, plan, button));
        cell.append(button);
      }
    }
    row.append(cell);
    return row;
  });
  rerender($("plans"), rows, $("catalog-title"));
}

function renderPending(confirmations) {
  const list = confirmations || [];
  $("pending-empty").hidden = list.length > 0;
  $("pending-table").hidden = list.length === 0;
  const rows = list.map((c) => {
    const row = el("tr");
    row.append(el("td", c.summary), el("td", c.principal), el("td", when(c.expires_at)));
    const button = el("button", "Cancel", {
      type: "button",
      "data-focus-key": "cancel:" + c.id,
      "aria-label": `Cancel the pending confirmation: ${c.summary}`,
    });
    button.addEventListener("click", () => cancelPending(c.id, button));
    const cell = el("td");
    cell.append(button);
    row.append(cell);
    return row;
  });
  rerender($("pending"), rows, $("pending-title"));
}

// ---- Pending approvals (billing:admin) ------------------------------------------

// renderApprovals lists the org's confirmations that wait for an approver,
// each with a countdown, a link to its approval page and Approve / Reject.
// res is the answer of the confirmations list, or null when the token is
// not an admin's and the section stays hidden.
function renderApprovals(res) {
  $("approvals").hidden = res === null;
  const list = res ? res.data.confirmations.filter((c) => c.approval === "pending") : [];
  $("approvals-empty").hidden = list.length > 0;
  $("approvals-table").hidden = list.length === 0;
  const rows = list.map((c) => approvalRow(c, localDeadline(c.expires_at, res)));
  rerender($("approvals-list"), rows, $("approvals-title"));
  stopApprovalsTimer();
  if (list.length > 0) {
    tickApprovals();
    state.approvalsTimer = setInterval(tickApprovals, 1000);
  }
}

function approvalRow(c, deadline) {
  const row = el("tr", null, { "data-deadline": String(deadline) });
  // A span, not the cell, is the timer: the cell keeps its table semantics.
  const countdown = el("td");
  countdown.append(el("span", null, { role: "timer", class: "countdown" }));
  row.append(el("td", c.summary), el("td", c.principal), el("td", c.client || "—"), el("td", approvalsText(c)), countdown);
  const cell = el("td", null, { class: "row-actions" });
  cell.append(
    el("a", "Review", {
      href: "/approvals/" + encodeURIComponent(c.id),
      "data-focus-key": "review:" + c.id,
      "aria-label": `Review: ${c.summary}`,
    }),
    decisionButton(c, "approve", "Approve"),
    decisionButton(c, "reject", "Reject"),
  );
  row.append(cell);
  return row;
}

function decisionButton(c, decision, label) {
  const button = el("button", label, {
    type: "button",
    "data-focus-key": `${decision}:${c.id}`,
    "aria-label": `${label}: ${c.summary}`,
  });
  button.addEventListener("click", () => decideInline(c.id, decision, button));
  return button;
}

// tickApprovals updates every row's countdown; an expired row can no longer
// be decided, so its buttons are disabled.
function tickApprovals() {
  for (const row of $("approvals-list").rows) {
    const left = timeLeft(Number(row.dataset.deadline));
    row.querySelector(".countdown").textContent = left || "Expired";
    if (!left) {
      row.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    }
  }
}

function stopApprovalsTimer() {
  clearInterval(state.approvalsTimer);
  state.approvalsTimer = null;
}

async function decideInline(id, decision, button) {
  const key = button.dataset.focusKey;
  button.disabled = true;
  const res = await api("POST", `/api/billing/confirmations/${encodeURIComponent(id)}/${decision}`);
  if (!(await refresh())) {
    return;
  }
  // A disabled button may have dropped the focus to the page body: put it
  // back on the same button if its row is still there, else on the heading.
  refocus(key, $("approvals-title"));
  if (!res.ok) {
    fail(describeError(res));
  } else if (decision === "approve" && res.data.approval === "pending") {
    const more = res.data.approvals_required - res.data.approvals_given;
    say(`Approved the change ${res.data.principal} asked for: ${approvalsText(res.data)}; it waits for ` +
      `${more} more approver${more === 1 ? "" : "s"} before it can be made.`);
  } else if (decision === "approve") {
    say(`Approved the change ${res.data.principal} asked for: ${approvalsText(res.data)}; their next call makes it.`);
  } else {
    say(`Rejected the change ${res.data.principal} asked for; it will not be made.`);
  }
}

// approversNeeded names how many people must approve a proposal.
function approversNeeded(details) {
  const n = (details && details.approvals_required) || 1;
  return n === 1 ? "another administrator" : `${n} other administrators`;
}

// ---- Audit log ------------------------------------------------------------------

function renderAudit(events) {
  $("audit").hidden = events === null;
  const rows = (events || []).map((e) => {
    const row = el("tr");
    for (const value of [when(e.at), e.event, e.principal, e.client, e.operation]) {
      row.append(el("td", value));
    }
    const confirmation = el("td", e.confirmation_id);
    if (e.event === "OPERATION_EXECUTED" && e.confirmation_id) {
      // Every executed change links to its signed receipt.
      const link = el("button", "Receipt", {
        type: "button",
        class: "link",
        "data-focus-key": "receipt:" + e.confirmation_id,
        "aria-label": `Show the receipt of ${e.confirmation_id}`,
      });
      link.addEventListener("click", () => showReceipt(e.confirmation_id));
      confirmation.append(" ", link);
    }
    row.append(confirmation, el("td", e.outcome), el("td", e.reason));
    return row;
  });
  $("audit-events").replaceChildren(...rows);
}

// ---- Webhook endpoints ------------------------------------------------------

// renderWebhooks shows each endpoint (its URL, format and events) with its
// recent deliveries: a row per delivery, or one saying there is none yet.
function renderWebhooks(endpoints) {
  $("webhooks").hidden = endpoints === null;
  $("webhooks-none").hidden = !endpoints || endpoints.length > 0;
  const rows = [];
  for (const e of endpoints || []) {
    const name = `${e.url} (${e.format}: ${e.events.join(", ")})`;
    const deliveries = e.recent_deliveries || [];
    if (deliveries.length === 0) {
      const row = el("tr", null, { "data-endpoint": e.id });
      row.append(el("td", name), el("td", "no deliveries yet", { colspan: "5" }));
      rows.push(row);
    }
    for (const d of deliveries) {
      const row = el("tr", null, { "data-endpoint": e.id, "data-event": d.event_id });
      const last = d.last_status ? `HTTP ${d.last_status}` : d.last_error || "";
      const status = d.status === "pending" && d.next_attempt_at ? `pending (next ${when(d.next_attempt_at)})` : d.status;
      row.append(el("td", name), el("td", d.type), el("td", when(d.created_at)), el("td", status),
        el("td", d.attempts), el("td", last));
      rows.push(row);
    }
  }
  $("webhook-deliveries").replaceChildren(...rows);
}

async function cancelPending(id, button) {
  button.disabled = true;
  const res = await api("POST", `/api/billing/confirmations/${encodeURIComponent(id)}/cancel`);
  if (!(await refresh())) {
    return;
  }
  if (res.ok) {
    say("Confirmation cancelled. Nothing was changed.");
  } else {
    fail(describeError(res));
  }
}

// ---- The handshake ------------------------------------------------------------

// propose makes the first call: it changes nothing and returns the summary
// the person must see before confirming. at is "period_end" for a downgrade
// at the period's end; "at" is sent only then ("now" is the default). A
// proposal for the current plan is keeping it: the server quotes cancelling
// the scheduled change.
async function propose(op, plan, button, at) {
  const keep = state.subscription && plan.id === state.subscription.plan;
  say(keep ? `Asking billingd what keeping ${plan.name} means…` : `Asking billingd what the change to ${plan.name} costs…`);
  await ask(op, plan, { to: plan.id }, button, at, keep ? `No change is scheduled: the plan stays ${plan.name}.`
    : `Already on ${plan.name}; there is nothing to confirm.`);
}

// proposeSeats is change_seats's first call: the seats of the current plan.
async function proposeSeats(quantity, button, at) {
  const sub = state.subscription;
  const plan = sub && state.plans.find((p) => p.id === sub.plan);
  if (!plan) {
    return;
  }
  say(`Asking billingd what ${quantity} seats of ${plan.name} cost…`);
  await ask("seats", plan, { quantity }, button, at, `The subscription has ${quantity} seats already; there is nothing to confirm.`);
}

// proposeEnd is cancel_subscription's first call (at: "period_end" or
// "now", which is never a default) or resume_subscription's (at empty).
async function proposeEnd(op, button, at) {
  const sub = state.subscription;
  const plan = sub && state.plans.find((p) => p.id === sub.plan);
  if (!plan) {
    return;
  }
  say(op === "resume" ? "Asking billingd what resuming means…" : "Asking billingd what cancelling means…");
  await ask(op, plan, {}, button, at, op === "resume" ? "The subscription is not ending; there is nothing to resume."
    : "The subscription already ends at the end of the period; there is nothing to confirm.");
}

// ask makes a first call of op with body (and "at": "period_end" when at
// says so, or whatever a cancellation says) and opens the dialog with its
// summary; noop is what the page says when there is nothing to confirm.
async function ask(op, plan, body, button, at, noop) {
  if (at === "period_end" || (op === "cancel" && at)) {
    body.at = at;
  }
  button.disabled = true;
  const res = await api("POST", `/api/billing/${op}`, body);
  button.disabled = false;
  if (res.status === 200 && res.data && res.data.noop) {
    if (await refresh()) {
      say(noop);
    }
    return;
  }
  if (res.status !== 202) {
    fail(describeError(res));
    return;
  }
  say("Nothing has changed yet. Read the summary, then confirm or cancel.");
  openDialog(op, plan, body, res.data, button.dataset.focusKey);
}

// isKeep: the proposal keeps the current plan and seats (it only cancels
// the scheduled change).
function isKeep(details) {
  return Boolean(details && details.from === details.to && details.quantity_from === details.quantity_to &&
    !details.cancellation && details.cancels_scheduled_change);
}

// isSeats: the proposal changes the seats of the current plan.
function isSeats(details) {
  return Boolean(details && details.from === details.to && details.quantity_from !== details.quantity_to);
}

// proposalFacts are the terms of a proposal the summary states in words,
// shown beside it: when a period-end change takes effect and what is
// charged then, and the scheduled change a proposal cancels.
function proposalFacts(d) {
  const facts = [];
  if (!d) {
    return facts;
  }
  if (isSeats(d)) {
    facts.push(["Seats", `${d.quantity_from} → ${d.quantity_to}`]);
  }
  if (d.cancellation === "now") {
    facts.push(["Access ends", "now — this cannot be undone"]);
    facts.push(["Credited to the balance (about)", money(d.credit_cents, d.currency, d)]);
  } else if (d.cancellation === "period_end") {
    facts.push(["Access ends", day(d.cancel_at)]);
  }
  if (d.at === "period_end") {
    facts.push(["Changes on", day(d.effective_at)], ["Due now", money(d.amount_due_now_cents, d.currency, d)]);
    if (d.next_charge) {
      facts.push([`Charged on ${day(d.next_charge_at || d.effective_at)}`, money(d.next_charge.amount_due_cents, d.currency, d)]);
    }
  }
  const cancels = d.cancels_scheduled_change;
  if (cancels) {
    facts.push(["Cancels", `the change to ${scheduledTo(cancels)} scheduled for ${day(cancels.at)}`]);
  }
  return facts;
}

function openDialog(op, plan, body, proposal, focusKey) {
  state.pending = {
    op, plan, body, proposal, focusKey,
    // expires_at is on the database's clock, which this browser's may not
    // match; counting ttl_seconds down from receipt reaches the same instant
    // without trusting the local clock.
    deadline: Date.now() + proposal.ttl_seconds * 1000,
    settled: false, // executed, or void: nothing left to cancel
    busy: false,
    outcome: null, // {message, isError} to show once the page is refreshed
  };
  const ends = { now: "Cancel the subscription now?", period_end: "Cancel the subscription at the end of the period?",
    resume: "Resume the subscription?" }[(proposal.details || {}).cancellation];
  $("confirm-title").textContent = ends || (isKeep(proposal.details) ? `Keep ${plan.name}?`
    : isSeats(proposal.details) ? "Confirm the change of seats" : "Confirm the plan change");
  $("confirm-summary").textContent = proposal.summary; // verbatim
  const facts = proposalFacts(proposal.details);
  $("confirm-facts").replaceChildren(...facts.flatMap(([label, value]) => [el("dt", label), el("dd", value)]));
  $("confirm-facts").hidden = facts.length === 0;
  const approval = $("confirm-approval");
  approval.hidden = !proposal.approval_required;
  approval.textContent = proposal.approval_required
    ? `This change also needs the approval of ${approversNeeded(proposal.details)} (${proposal.approval_url}) before it can be confirmed.`
    : "";
  $("confirm-error").textContent = "";
  $("confirm-ok").disabled = false;
  tick();
  state.pending.timer = setInterval(tick, 250);
  $("confirm-dialog").showModal();
  // Cancel, not Confirm, takes the focus: Enter must never charge by accident.
  $("confirm-cancel").focus();
}

function tick() {
  const p = state.pending;
  if (!p) {
    return;
  }
  const left = timeLeft(p.deadline);
  const countdown = $("confirm-countdown");
  if (left) {
    countdown.textContent = `Expires in ${left} (at ${when(p.proposal.expires_at)}).`;
    return;
  }
  countdown.textContent = "This confirmation has expired; nothing was changed. Cancel and start again.";
  $("confirm-ok").disabled = true;
  clearInterval(p.timer);
}

// confirmChange makes the second call with the token of the proposal shown.
async function confirmChange() {
  const p = state.pending;
  if (!p || p.busy) {
    return;
  }
  p.busy = true;
  $("confirm-ok").disabled = true;
  $("confirm-error").textContent = "";
  // The second call repeats the first one's body (to, and at) plus the token.
  const res = await api("POST", `/api/billing/${p.op}`, { ...p.body, confirm_token: p.proposal.confirm_token });
  p.busy = false;
  if (res.ok) {
    p.settled = true;
    p.outcome = { message: doneMessage(p, res.data), isError: false,
      receiptOf: res.data && res.data.receipt ? p.proposal.confirmation_id : "" };
    $("confirm-dialog").close("confirmed");
    return;
  }
  const code = errorCode(res);
  if (res.status === 0 || ["upstream_unavailable", "rate_limited", "approval_pending"].includes(code)) {
    // The token is still good: the same Confirm may be tried again.
    $("confirm-error").textContent = describeError(res) + " You can try Confirm again.";
    $("confirm-ok").disabled = false;
    return;
  }
  // Expired, used, mismatched, declined…: the token is spent.
  p.settled = true;
  p.outcome = { message: describeError(res), isError: true };
  $("confirm-dialog").close("failed");
}

// doneMessage says what a confirmed proposal did: scheduled a change for
// the period's end (the plan is unchanged until then), kept the plan, or
// changed it now.
function doneMessage(p, data) {
  const sub = (data && data.subscription) || {};
  switch ((p.proposal.details || {}).cancellation) {
  case "now":
    return "Cancelled: access has ended.";
  case "period_end":
    return `Cancelled at the end of the period: the subscription ends on ${day(sub.current_period_end)}.`;
  case "resume":
    return `Resumed: the subscription renews on ${day(sub.current_period_end)}.`;
  }
  if (sub.scheduled_change) {
    const change = sub.scheduled_change;
    if (change.to === sub.plan && change.quantity) {
      return `Scheduled: the seats change to ${change.quantity} on ${day(change.at)}. Nothing changed now.`;
    }
    return `Scheduled: the plan changes to ${scheduledTo(change)} on ${day(change.at)}. Nothing changed now.`;
  }
  if (isKeep(p.proposal.details)) {
    return `Kept ${p.plan.name}: the scheduled change is cancelled.`;
  }
  if (isSeats(p.proposal.details)) {
    return `Done: ${p.plan.name} now has ${sub.quantity} seats.`;
  }
  return `Done: the plan is now ${p.plan.name}.`;
}

// dialogClosed runs however the dialog closed (Confirm, Cancel, Escape): an
// unsettled proposal is cancelled so that its token cannot be used later.
// The outcome is announced after the page is refreshed, so that what the
// message says is what the page shows.
async function dialogClosed() {
  const p = state.pending;
  state.pending = null;
  if (!p) {
    return;
  }
  clearInterval(p.timer);
  refocus(p.focusKey, $("catalog-title"));
  if (!p.settled) {
    const res = await api("POST", `/api/billing/confirmations/${encodeURIComponent(p.proposal.confirmation_id)}/cancel`);
    p.outcome = res.ok
      ? { message: "Cancelled. Nothing was changed.", isError: false }
      : { message: describeError(res), isError: true };
  }
  if (await refresh()) {
    // Keep hides itself once nothing is scheduled: its focus goes to the
    // plan it kept.
    const active = document.activeElement;
    if (!active || active === document.body || active.closest("[hidden]")) {
      $("plan-title").focus();
    }
    (p.outcome.isError ? fail : say)(p.outcome.message);
    if (p.outcome.receiptOf) {
      await showReceipt(p.outcome.receiptOf);
      say(p.outcome.message);
    }
  }
}

// ---- Wiring -------------------------------------------------------------------

function init() {
  $("confirm-ok").addEventListener("click", confirmChange);
  $("keep-plan").addEventListener("click", () => {
    const sub = state.subscription;
    const plan = sub && state.plans.find((p) => p.id === sub.plan);
    if (plan) {
      propose("upgrade", plan, $("keep-plan"));
    }
  });
  $("cancel-period-end").addEventListener("click", () => proposeEnd("cancel", $("cancel-period-end"), "period_end"));
  $("cancel-now").addEventListener("click", () => proposeEnd("cancel", $("cancel-now"), "now"));
  $("resume").addEventListener("click", () => proposeEnd("resume", $("resume"), ""));
  $("seats-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const quantity = Number($("seats-quantity").value);
    if (!Number.isInteger(quantity) || quantity < 1 || quantity > 10000) {
      fail("Seats must be a whole number from 1 to 10000.");
      return;
    }
    proposeSeats(quantity, $("change-seats"), $("seats-when").value);
  });
  $("confirm-cancel").addEventListener("click", () => $("confirm-dialog").close("cancelled"));
  const dialog = $("confirm-dialog");
  dialog.addEventListener("cancel", (event) => {
    // Escape while the second call is in flight: wait for its answer.
    if (state.pending && state.pending.busy) {
      event.preventDefault();
    }
  });
  dialog.addEventListener("close", dialogClosed);
  startPage({ load: refresh, clear: clearPage, landing: () => $("plan-title") });
}

document.addEventListener("DOMContentLoaded", init);
