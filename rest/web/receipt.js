// billingd receipts in the dashboard: a receipt is fetched, decoded and its
// signature checked here, in the page, with WebCrypto against the keys
// billingd publishes at /.well-known/jwks.json, and the summary shown next
// to it is checked against the receipt's summary_sha256. The page trusts
// neither the receipt endpoint nor itself: a receipt that does not verify
// says so.
"use strict";

function base64urlBytes(s) {
  const b64 = s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

function hex(buffer) {
  return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");
}

// webCryptoAlgorithms maps a JWS alg to WebCrypto's import and verify
// parameters. ES256 signatures are r‖s, the form WebCrypto expects.
const webCryptoAlgorithms = {
  ES256: { importAs: { name: "ECDSA", namedCurve: "P-256" }, verifyAs: { name: "ECDSA", hash: "SHA-256" } },
  EdDSA: { importAs: { name: "Ed25519" }, verifyAs: { name: "Ed25519" } },
};

// checkReceipt decodes a compact JWS and verifies it: {claims, header,
// verified, reason}.
async function checkReceipt(jws) {
  const parts = String(jws).split(".");
  if (parts.length !== 3) {
    return { claims: null, verified: false, reason: "not a compact JWS" };
  }
  const decoder = new TextDecoder();
  let header, claims;
  try {
    header = JSON.parse(decoder.decode(base64urlBytes(parts[0])));
    claims = JSON.parse(decoder.decode(base64urlBytes(parts[1])));
  } catch (_) {
    return { claims: null, verified: false, reason: "the receipt cannot be decoded" };
  }
  const alg = webCryptoAlgorithms[header.alg];
  if (!alg) {
    return { header, claims, verified: false, reason: "unsupported algorithm" };
  }
  let jwks;
  try {
    const res = await fetch("/.well-known/jwks.json", { cache: "no-store" });
    jwks = await res.json();
  } catch (_) {
    return { header, claims, verified: false, reason: "the published keys could not be read" };
  }
  const jwk = (jwks.keys || []).find((k) => k.kid === header.kid);
  if (!jwk) {
    return { header, claims, verified: false, reason: "its key is not among the published keys" };
  }
  try {
    const key = await crypto.subtle.importKey("jwk", { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y },
      alg.importAs, false, ["verify"]);
    const signed = new TextEncoder().encode(parts[0] + "." + parts[1]);
    const ok = await crypto.subtle.verify(alg.verifyAs, key, base64urlBytes(parts[2]), signed);
    return { header, claims, verified: ok, reason: ok ? "" : "the signature does not match" };
  } catch (_) {
    return { header, claims, verified: false, reason: "this browser cannot check the signature" };
  }
}

async function sha256Hex(text) {
  return hex(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

// consentWords say what each consent method means (contract §11).
const consentWords = {
  agent_relayed: "an agent presented the token: billingd has only the agent's word",
  person_session: "the person's own signed-in call",
  elicitation_form: "the person accepted the MCP client's confirmation form: the client's word",
  mcp_app_view: "the person pressed Confirm in billingd's own view in the chat app",
  verified_sign_in: "the person signed in again to confirm it",
  approved: "another person approved it",
  policy_allow: "nobody was asked: the organisation's policy allows it",
  mandate: "nobody was asked: a standing mandate the person signed for earlier covered it",
};

// consentText is how the person agreed, for people.
function consentText(k) {
  if (!k) {
    return "not recorded (a receipt from before billingd recorded it)";
  }
  let text = `${k.method} (${consentWords[k.method] || "unknown method"}); human present: ${k.human_present}`;
  if (k.approved_by) {
    text += `; approved by ${k.approved_by}`;
  }
  if (k.mandate_id) {
    text += `; mandate ${k.mandate_id}`;
  }
  if (k.auth_time) {
    text += `; signed in at ${when(k.auth_time)}`;
  }
  if (k.acr) {
    text += ` (acr ${k.acr})`;
  }
  return text;
}

// quotedText is every part of the amount the summary stated. total is the
// amount they add up to: amount_due_now_cents of a quote, amount_due_cents
// of a renewal's quoted_next_charge.
function quotedText(q, currency, digits, total = q.amount_due_now_cents) {
  let text = money(q.subtotal_cents, currency, digits);
  if (q.discount_cents) text += ` − ${money(q.discount_cents, currency, digits)} discount`;
  if (q.tax_cents) text += ` + ${money(q.tax_cents, currency, digits)} tax`;
  if (q.credit_applied_cents) text += ` − ${money(q.credit_applied_cents, currency, digits)} account credit`;
  return `${text} = ${money(total, currency, digits)}`;
}

// receiptFacts are the claims shown, in order, with their labels. A change
// scheduled for the period's end was signed when it was scheduled: it says
// when it takes effect (effective_at), and "executed at" is when it was
// scheduled. A change that cancelled a scheduled one names it (cancels).
function receiptFacts(c) {
  const scheduled = c.at === "period_end";
  const facts = [["Requested by", c.sub], ["Agent or app", c.client || "—"]];
  if (c.verified_at) {
    facts.push(["Identity verified at", when(c.verified_at)]);
  }
  if (c.approver) {
    facts.push(["Approved by", c.approver]);
  }
  facts.push(["How the person agreed", consentText(c.consent)]);
  const seats = c.quantity_from && c.quantity_to && c.quantity_from !== c.quantity_to;
  const ends = { now: "ends now", period_end: `ends on ${day(c.cancel_at)}`, resume: "renews again" }[c.cancellation];
  const change = ends ? `${c.operation}: ${c.from}, ${ends}`
    : seats ? `${c.operation}: ${c.from}, ${c.quantity_from} → ${c.quantity_to} seats`
      : c.from === c.to && c.cancels ? `${c.operation}: keep ${c.from}` : `${c.operation}: ${c.from} → ${c.to}`;
  facts.push(["Change", change]);
  if (!seats && c.quantity_from > 1) {
    facts.push(["Seats", String(c.quantity_from)]);
  }
  if (c.credited_cents) {
    facts.push(["Credited to the balance", money(c.credited_cents, c.currency, c)]);
  } else if (c.cancellation === "now" && c.credit_cents) {
    facts.push(["Credit quoted", `about ${money(c.credit_cents, c.currency, c)} to the balance (what Stripe credited is not known)`]);
  } else if (c.credit_cents) {
    facts.push(["Credited on the next invoice", money(c.credit_cents, c.currency, c)]);
  }
  if (scheduled) {
    facts.push(["Takes effect", `${day(c.effective_at)} (${c.effective_at}), the end of the period: nothing changed or was charged when it was scheduled`]);
  } else if (c.effective_at) {
    facts.push(["Takes effect", when(c.effective_at)]);
  }
  if (c.quoted_next_charge) {
    facts.push(["Quoted for the renewal", quotedText(c.quoted_next_charge, c.currency, c, c.quoted_next_charge.amount_due_cents)]);
  }
  if (c.cancels) {
    facts.push(["Cancels", `the change to ${c.cancels.to} scheduled for ${day(c.cancels.at)} (${c.cancels.confirmation_id})`]);
  }
  if (c.quoted) {
    facts.push(["Quoted", quotedText(c.quoted, c.currency, c)]);
  }
  if (c.amount_invoiced_unknown) {
    // billingd could not identify the change's own invoice: no amount is
    // stated as invoiced, neither the quote nor a later invoice's.
    facts.push(["Amount invoiced", "unknown: billingd could not identify the invoice Stripe made for this change"]);
  } else {
    facts.push(["Due now", money(c.amount_due_now_cents, c.currency, c)]);
  }
  if (c.proration_date) {
    facts.push(["Proration date", when(c.proration_date)]);
  }
  facts.push(
    [scheduled ? "Scheduled at" : "Executed at", when(c.executed_at)],
    ["Mode", c.livemode ? "Live: real money" : "Test mode: no real money moved"],
    ["Stripe subscription", c.stripe_subscription_id],
    ["Idempotency key", c.idempotency_key],
    ["Confirmation", c.confirmation_id],
    ["Summary SHA-256", c.summary_sha256],
    ["Issuer", c.iss],
  );
  return facts;
}

// showReceipt loads a confirmation's receipt and shows it, checked.
async function showReceipt(confirmationID) {
  const res = await api("GET", `/api/billing/confirmations/${encodeURIComponent(confirmationID)}/receipt`);
  if (!res.ok) {
    fail(describeError(res));
    return;
  }
  const { summary, receipt } = res.data;
  const check = await checkReceipt(receipt);
  const summaryMatches = check.claims !== null && (await sha256Hex(summary)) === check.claims.summary_sha256;
  $("receipt-summary").textContent = summary; // verbatim, as the person saw it
  $("receipt-signature").textContent = check.verified
    ? `Signature verified with billingd's published key ${check.header.kid}.`
    : `Signature NOT verified: ${check.reason}.`;
  $("receipt-signature").className = check.verified ? "verified" : "unverified";
  $("receipt-summary-check").textContent = summaryMatches
    ? "The summary above is the one the receipt was signed for (its SHA-256 matches)."
    : "The summary above does NOT match the receipt's summary_sha256.";
  $("receipt-summary-check").className = summaryMatches ? "verified" : "unverified";
  const facts = [];
  for (const [label, value] of check.claims ? receiptFacts(check.claims) : []) {
    facts.push(el("dt", label), el("dd", value));
  }
  $("receipt-claims").replaceChildren(...facts);
  $("receipt-jws").textContent = receipt;
  $("receipt").hidden = false;
  $("receipt-title").focus();
}
