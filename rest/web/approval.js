// billingd approval page, where approval_url points. An administrator of the
// org who is not the requester reads the summary the requester was given and
// approves or rejects the change; the server enforces who may, the page
// shows its answer.
//
// The confirmation id comes from the address, which anyone can craft: it is
// checked against the shape billingd issues before it is used at all, looked
// up in the admin's list of the org's pending confirmations (never fetched
// by itself), and only ever shown with textContent.
"use strict";

// CONFIRMATION_ID is the shape of billingd's confirmation ids: cfm_ and 16
// random bytes in unpadded URL-safe base64.
const CONFIRMATION_ID = /^cfm_[A-Za-z0-9_-]{22}$/;

const review = {
  id: "", // the validated id from the address
  confirmation: null, // as listed, then as the last decision returned it
  deadline: 0, // expires_at on this browser's clock
  timer: null,
  busy: false, // a decision is in flight
  closed: false, // the server said no decision can be made here any more
};

const NOT_LISTED = "There is no change waiting for approval under this link in your organisation: it has expired, " +
  "was rejected, made or cancelled, or belongs to another organisation. Nothing will happen through this link.";

const NOT_ADMIN = "This access token does not have billing:admin, so it can neither see nor decide other people's " +
  "changes. Sign out and paste an administrator's token.";

// HINTS explain the refusals a decision can meet; the server's own message
// and code follow.
const HINTS = {
  operation_denied: "You asked for this change yourself, so another administrator of the organisation has to decide on it.",
  consent_token_expired: "The approval window ended before the change had all its approvals, so it was rejected (expired): nothing will be changed, and the requester has to start again.",
  consent_token_invalid: "The confirmation is no longer waiting for approval: it was decided, made or cancelled meanwhile.",
  not_found: "The confirmation no longer exists in your organisation.",
  insufficient_scope: "Deciding needs an access token with billing:admin.",
};

// idFromPath returns the confirmation id the address names, or "" when the
// address is not an approval link.
function idFromPath() {
  const match = /^\/approvals\/([^/]+)$/.exec(location.pathname);
  if (!match) {
    return "";
  }
  try {
    const id = decodeURIComponent(match[1]);
    return CONFIRMATION_ID.test(id) ? id : "";
  } catch (_) {
    return ""; // malformed percent-encoding
  }
}

// ---- Loading ----------------------------------------------------------------

// loadApproval finds the confirmation in the org's pending list; false when
// the token was refused.
async function loadApproval() {
  const [list, who] = await Promise.all([
    api("GET", "/api/billing/confirmations"),
    // Only billing:admin lists the whole org and may decide: the sign-in's
    // scopes tell whether it has it.
    api("GET", "/auth/session"),
  ]);
  if (tokenRefused([list])) {
    return false;
  }
  showSignedIn(true);
  if (!list.ok) {
    showMissing(describeError(list));
  } else if (!isAdmin(who)) {
    showMissing(NOT_ADMIN);
  } else {
    const found = list.data.confirmations.find((c) => c.id === review.id);
    if (found) {
      showConfirmation(found, localDeadline(found.expires_at, list));
    } else {
      showMissing(NOT_LISTED);
    }
  }
  return true;
}

function showMissing(message) {
  stopCountdown();
  review.confirmation = null;
  $("approval-details").hidden = true;
  $("approval-missing").hidden = false;
  $("approval-missing").textContent = message;
}

function showConfirmation(c, deadline) {
  Object.assign(review, { confirmation: c, deadline, closed: false });
  $("approval-missing").hidden = true;
  $("approval-details").hidden = false;
  $("approval-summary").textContent = c.summary; // verbatim: what the requester was shown
  $("approval-principal").textContent = c.principal;
  $("approval-client").textContent = c.client || "None (a person's own token)";
  report("", false);
  renderState();
  stopCountdown();
  tickApproval();
  review.timer = setInterval(tickApproval, 1000);
}

function clearApproval() {
  showMissing("");
  $("approval-missing").hidden = true;
  for (const id of ["approval-summary", "approval-principal", "approval-client", "approval-state", "approval-progress",
    "approval-countdown", "decision"]) {
    $(id).textContent = "";
  }
}

// ---- State and countdown ----------------------------------------------------------

function stateText(c) {
  switch (c.approval) {
    case "pending":
      return c.approvals_given > 0 ? "Waiting for more approvers" : "Waiting for a decision";
    case "granted":
      return `Approved by ${(c.approvers || []).join(", ") || c.approver}`;
    case "rejected":
      return `Rejected by ${c.approver}`;
    default:
      return "Needs no approval: the requester confirms this change alone";
  }
}

// renderState shows the approval state; the buttons work only while the
// confirmation waits for a decision that can still be made.
function renderState() {
  const c = review.confirmation;
  $("approval-state").textContent = stateText(c);
  $("approval-progress").textContent = approvalsText(c) || "None needed";
  const open = c.approval === "pending" && timeLeft(review.deadline) !== "" && !review.busy && !review.closed;
  $("approve").disabled = !open;
  $("reject").disabled = !open;
}

function tickApproval() {
  const c = review.confirmation;
  if (!c) {
    return;
  }
  const left = timeLeft(review.deadline);
  const countdown = $("approval-countdown");
  if (c.approval === "rejected") {
    countdown.textContent = "None: the change will not be made.";
    stopCountdown();
  } else if (left) {
    countdown.textContent = `${left} (until ${when(c.expires_at)})`;
  } else {
    countdown.textContent = "Expired: the change can no longer be approved or made.";
    stopCountdown();
    renderState();
  }
}

function stopCountdown() {
  clearInterval(review.timer);
  review.timer = null;
}

// ---- Deciding ------------------------------------------------------------------------

async function decide(decision) {
  if (review.busy || !review.confirmation) {
    return;
  }
  review.busy = true;
  renderState();
  report(decision === "approve" ? "Approving…" : "Rejecting…", false);
  const res = await api("POST", `/api/billing/confirmations/${encodeURIComponent(review.id)}/${decision}`);
  review.busy = false;
  if (tokenRefused([res])) {
    return;
  }
  if (res.ok) {
    review.confirmation = res.data;
    report(decisionText(decision, res.data), false);
  } else {
    // A network failure, an overloaded server or a rate limit may pass;
    // every other refusal is final for this page.
    review.closed = !(res.status === 0 || res.status >= 500 || errorCode(res) === "rate_limited");
    report(`${HINTS[errorCode(res)] || "The decision was not recorded."} billingd said: ${describeError(res)}`, true);
  }
  renderState();
  tickApproval();
  // The pressed button is now disabled, which drops the focus: the outcome
  // takes it, so that keyboard and screen reader users land on the answer.
  if ($(decision).disabled) {
    $("decision").focus();
  }
}

// decisionText says what a recorded decision did: an approval counted
// (and whether more are needed), or the rejection.
function decisionText(decision, c) {
  if (decision === "reject") {
    return "Rejected. The change will not be made; the requester's next call is refused.";
  }
  if (c.approval === "pending") {
    const more = c.approvals_required - c.approvals_given;
    return `Approved: ${approvalsText(c)}. The change waits for ${more} more approver${more === 1 ? "" : "s"}; ` +
      "nothing has changed yet.";
  }
  return `Approved: ${approvalsText(c)}. The requester's next call makes the change; nothing has changed yet.`;
}

// report shows a decision's outcome in the page's aria-live region.
function report(message, isError) {
  const region = $("decision");
  region.textContent = message;
  region.classList.toggle("failed", isError);
}

// ---- Wiring --------------------------------------------------------------------------

function initApproval() {
  review.id = idFromPath();
  if (!review.id) {
    $("sign-in").hidden = true;
    $("bad-link").hidden = false;
    return;
  }
  $("approval-id").textContent = review.id;
  $("approve").addEventListener("click", () => decide("approve"));
  $("reject").addEventListener("click", () => decide("reject"));
  startPage({ load: loadApproval, clear: clearApproval, landing: () => $("approval-title") });
}

document.addEventListener("DOMContentLoaded", initApproval);
