// billingd dashboard. It signs in with a pasted access token and drives the
// public REST API exactly as any other client would: the server enforces
// every rule, the page only shows what the API answers.
//
// Every value that comes from the server is written with textContent or
// setAttribute, never parsed as HTML, so a plan name or a summary can never
// become markup. The page's Content-Security-Policy forbids inline script
// as a second line of defence.
"use strict";

const TOKEN_KEY = "billingd.access_token";
const $ = (id) => document.getElementById(id);

const state = {
  subscription: null,
  plans: [],
  // The proposal shown in the confirmation dialog:
  // {op, plan, proposal, deadline, focusKey, settled, busy, timer}.
  pending: null,
};

// ---- API -------------------------------------------------------------------

function accessToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

// api calls the REST API and never throws: a network failure is status 0.
async function api(method, path, body) {
  const init = {
    method,
    cache: "no-store",
    headers: { Accept: "application/json", Authorization: "Bearer " + accessToken() },
  };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  try {
    const res = await fetch(path, init);
    let data = null;
    try {
      data = await res.json();
    } catch (_) {
      // not JSON: leave data null
    }
    return { status: res.status, ok: res.ok, data };
  } catch (_) {
    return { status: 0, ok: false, data: null };
  }
}

function describeError(res) {
  if (res.status === 0) {
    return "Could not reach billingd. Check the connection and try again.";
  }
  const err = res.data && res.data.error;
  if (err && err.message) {
    return `${err.message} (${err.code}).`;
  }
  return `The request failed with HTTP status ${res.status}.`;
}

// ---- Messages and formatting ------------------------------------------------

function say(message) {
  $("error").textContent = "";
  $("status").textContent = message;
}

function fail(message) {
  $("status").textContent = "";
  $("error").textContent = message;
}

// el makes an element with text content and attributes.
function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) {
    node.textContent = String(text);
  }
  for (const [name, value] of Object.entries(attrs || {})) {
    node.setAttribute(name, value);
  }
  return node;
}

function money(cents, currency) {
  const code = String(currency || "").toUpperCase();
  try {
    return new Intl.NumberFormat(undefined, { style: "currency", currency: code }).format(cents / 100);
  } catch (_) {
    return `${(cents / 100).toFixed(2)} ${code}`;
  }
}

function when(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

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
  if (key === null) {
    return;
  }
  const again = container.querySelector(`[data-focus-key="${CSS.escape(key || "")}"]`);
  (again || fallback).focus();
}

// ---- Sign in ----------------------------------------------------------------

function showSignedIn(signedIn) {
  $("sign-in").hidden = signedIn;
  $("account").hidden = !signedIn;
  $("sign-out").hidden = !signedIn;
}

async function signIn(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  if (!token) {
    fail("Paste an access token first.");
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  if (await refresh()) {
    say("Signed in.");
    $("plan-title").focus();
  }
}

function signOut(message, isError) {
  sessionStorage.removeItem(TOKEN_KEY);
  showSignedIn(false);
  for (const id of ["plans", "pending", "audit-events"]) {
    $(id).replaceChildren();
  }
  (isError ? fail : say)(message);
  $("token").focus();
}

// ---- Loading ----------------------------------------------------------------

// refresh reloads everything the page shows; false when the token was
// refused.
async function refresh() {
  const [sub, plans, pending, audit] = await Promise.all([
    api("GET", "/api/billing/subscription"),
    api("GET", "/api/billing/plans"),
    api("GET", "/api/billing/confirmations"),
    // Only billing:admin may read the audit log: try, and show it if allowed.
    api("GET", "/api/billing/audit?limit=50"),
  ]);
  if ([sub, plans, pending].some((r) => r.status === 401)) {
    signOut("The access token was refused: it may have expired or be meant for another server. Paste a new one.", true);
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
  renderAudit(audit.ok ? audit.data.events : null);
  return true;
}

function renderSubscription() {
  const sub = state.subscription || {};
  $("sub-org").textContent = sub.org || "—";
  $("sub-plan").textContent = sub.plan ? planName(sub.plan) : "—";
  $("sub-status").textContent = sub.status || "—";
  $("sub-period-end").textContent = sub.current_period_end ? when(sub.current_period_end) : "—";
}

function renderPlans() {
  const current = state.plans.find((p) => state.subscription && p.id === state.subscription.plan);
  const rows = state.plans.map((plan) => {
    const row = el("tr");
    row.append(el("th", plan.name, { scope: "row" }), el("td", `${money(plan.amount_cents, plan.currency)} / ${plan.interval}`));
    const cell = el("td");
    if (current && plan.id === current.id) {
      cell.append(el("span", "Current plan", { class: "current" }));
    } else if (current && plan.amount_cents !== current.amount_cents) {
      // Plans are ordered by price: a dearer plan is an upgrade.
      const op = plan.amount_cents > current.amount_cents ? "upgrade" : "downgrade";
      const label = `${op === "upgrade" ? "Upgrade" : "Downgrade"} to ${plan.name}`;
      const button = el("button", label, { type: "button", "data-focus-key": "plan:" + plan.id });
      button.addEventListener("click", () => propose(op, plan, button));
      cell.append(button);
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

function renderAudit(events) {
  $("audit").hidden = events === null;
  const rows = (events || []).map((e) => {
    const row = el("tr");
    for (const value of [when(e.at), e.event, e.principal, e.client, e.operation, e.confirmation_id, e.outcome, e.reason]) {
      row.append(el("td", value));
    }
    return row;
  });
  $("audit-events").replaceChildren(...rows);
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
// the person must see before confirming.
async function propose(op, plan, button) {
  button.disabled = true;
  say(`Asking billingd what the change to ${plan.name} costs…`);
  const res = await api("POST", `/api/billing/${op}`, { to: plan.id });
  button.disabled = false;
  if (res.status === 200 && res.data && res.data.noop) {
    if (await refresh()) {
      say(`Already on ${plan.name}; there is nothing to confirm.`);
    }
    return;
  }
  if (res.status !== 202) {
    fail(describeError(res));
    return;
  }
  say("Nothing has changed yet. Read the summary, then confirm or cancel.");
  openDialog(op, plan, res.data, button.dataset.focusKey);
}

function openDialog(op, plan, proposal, focusKey) {
  state.pending = {
    op, plan, proposal, focusKey,
    // expires_at is on the database's clock, which this browser's may not
    // match; counting ttl_seconds down from receipt reaches the same instant
    // without trusting the local clock.
    deadline: Date.now() + proposal.ttl_seconds * 1000,
    settled: false, // executed, or void: nothing left to cancel
    busy: false,
    outcome: null, // {message, isError} to show once the page is refreshed
  };
  $("confirm-summary").textContent = proposal.summary; // verbatim
  const approval = $("confirm-approval");
  approval.hidden = !proposal.approval_required;
  approval.textContent = proposal.approval_required
    ? `This change also needs an administrator's approval (${proposal.approval_url}) before it can be confirmed.`
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
  const left = Math.max(0, Math.ceil((p.deadline - Date.now()) / 1000));
  const countdown = $("confirm-countdown");
  if (left > 0) {
    const mmss = `${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")}`;
    countdown.textContent = `Expires in ${mmss} (at ${when(p.proposal.expires_at)}).`;
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
  const res = await api("POST", `/api/billing/${p.op}`, { to: p.plan.id, confirm_token: p.proposal.confirm_token });
  p.busy = false;
  if (res.ok) {
    p.settled = true;
    p.outcome = { message: `Done: the plan is now ${p.plan.name}.`, isError: false };
    $("confirm-dialog").close("confirmed");
    return;
  }
  const code = res.data && res.data.error ? res.data.error.code : "";
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
  const opener = document.querySelector(`[data-focus-key="${CSS.escape(p.focusKey || "")}"]`);
  (opener || $("catalog-title")).focus();
  if (!p.settled) {
    const res = await api("POST", `/api/billing/confirmations/${encodeURIComponent(p.proposal.confirmation_id)}/cancel`);
    p.outcome = res.ok
      ? { message: "Cancelled. Nothing was changed.", isError: false }
      : { message: describeError(res), isError: true };
  }
  if (await refresh()) {
    (p.outcome.isError ? fail : say)(p.outcome.message);
  }
}

// ---- Wiring -------------------------------------------------------------------

function init() {
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut("Signed out."));
  $("confirm-ok").addEventListener("click", confirmChange);
  $("confirm-cancel").addEventListener("click", () => $("confirm-dialog").close("cancelled"));
  const dialog = $("confirm-dialog");
  dialog.addEventListener("cancel", (event) => {
    // Escape while the second call is in flight: wait for its answer.
    if (state.pending && state.pending.busy) {
      event.preventDefault();
    }
  });
  dialog.addEventListener("close", dialogClosed);
  if (accessToken()) {
    refresh();
  } else {
    showSignedIn(false);
  }
}

document.addEventListener("DOMContentLoaded", init);
