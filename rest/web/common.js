// billingd pages: what the dashboard and the approval page share. People
// sign in at the organisation's identity provider (/auth/login, OpenID
// Connect); the server keeps the session and names it with an HttpOnly
// cookie, and every state-changing call carries the session's CSRF token.
// Under billingd dev a pasted access token works too. Either way the pages
// drive the public REST API exactly as any other client would: the server
// enforces every rule, a page only shows what the API answers.
//
// Every value that comes from the server (or from the address bar) is
// written with textContent or setAttribute, never parsed as HTML, so a plan
// name or a summary can never become markup. The pages' Content-Security-
// Policy forbids inline script as a second line of defence.
"use strict";

const TOKEN_KEY = "billingd.access_token";
const $ = (id) => document.getElementById(id);

// ---- API -------------------------------------------------------------------

function accessToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

// signedIn is /auth/session's answer: who is signed in with the cookie and
// the CSRF token of their calls.
let signedIn = { signed_in: false };

// api calls the REST API and never throws: a network failure is status 0.
// clockOffset is how far the server's clock is ahead of this browser's (see
// localDeadline).
async function api(method, path, body) {
  const init = {
    method,
    cache: "no-store",
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  };
  if (accessToken()) {
    init.headers.Authorization = "Bearer " + accessToken();
  } else if (signedIn.signed_in && method !== "GET") {
    init.headers["X-CSRF-Token"] = signedIn.csrf_token;
  }
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
    return { status: res.status, ok: res.ok, data, clockOffset: clockOffsetOf(res) };
  } catch (_) {
    return { status: 0, ok: false, data: null, clockOffset: 0 };
  }
}

// clockOffsetOf reads the server's clock from the Date header. It has whole
// seconds, so half a second is added to centre the error.
function clockOffsetOf(res) {
  const server = Date.parse(res.headers.get("Date") || "");
  return Number.isNaN(server) ? 0 : server + 500 - Date.now();
}

// localDeadline is when, on this browser's clock, a server timestamp (an
// expires_at) arrives: a browser whose clock is wrong still counts down to
// the instant the server will enforce.
function localDeadline(iso, res) {
  return Date.parse(iso) - res.clockOffset;
}

function errorCode(res) {
  return res.data && res.data.error ? res.data.error.code : "";
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

// money writes an amount as billingd's summary writes it ("$17.42",
// "¥1,900", "5.120 KWD", "500 ISK"). The amount is in the currency's minor
// unit as Stripe counts it, and digits (an object with the server's
// currency_exponent and currency_written_whole: details, a plan, a receipt)
// say what that unit is. The browser's own currency data is never used for
// the digits: it has 0 for ISK, HUF, COP and IDR, which Stripe counts in
// hundredths. Without digits (a receipt signed before they were part of
// it), the amount is written as the integer it is.
function money(minor, currency, digits) {
  const code = String(currency || "").toUpperCase();
  const exponent = digits && digits.currency_exponent;
  if (!Number.isInteger(exponent) || exponent < 0 || !Number.isSafeInteger(minor)) {
    return `${minor} (${code} minor units)`;
  }
  const s = String(Math.abs(minor)).padStart(exponent + 1, "0");
  const fraction = s.slice(s.length - exponent);
  let number = s.slice(0, s.length - exponent).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  if (fraction && !(digits.currency_written_whole && /^0+$/.test(fraction))) {
    number += "." + fraction;
  }
  const symbol = currencySymbol(code);
  return (minor < 0 ? "-" : "") + (symbol ? symbol + number : `${number} ${code}`);
}

// currencySymbol is the currency's symbol as English text writes it ("$",
// "€", "CA$"), or "" when it has only letters ("CHF", "KWD"): such amounts
// are written with the code after the number, as the summary writes them.
function currencySymbol(code) {
  try {
    const parts = new Intl.NumberFormat("en-US", { style: "currency", currency: code }).formatToParts(0);
    const symbol = (parts.find((p) => p.type === "currency") || {}).value || "";
    return /[^\p{L}\s]/u.test(symbol) ? symbol : "";
  } catch (_) {
    return "";
  }
}

function when(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

// day is the calendar date of a server timestamp, in UTC as the summaries
// write it ("Dec 12, 2026"): a change scheduled for the period's end is
// named by the same day on the page as in the summary the person agreed to.
function day(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleDateString(undefined, { dateStyle: "medium", timeZone: "UTC" });
}

// timeLeft is "m:ss" until deadline (a Date.now() instant), or "" once it
// has passed.
function timeLeft(deadline) {
  const left = Math.max(0, Math.ceil((deadline - Date.now()) / 1000));
  return left > 0 ? `${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")}` : "";
}

// approvalsText says how far a confirmation's approvals got: "1 of 2
// approved (boss)"; "" for one that needs no approval. Both pages write it
// the same way.
function approvalsText(c) {
  if (!c.approval) {
    return "";
  }
  const given = c.approvals_given || 0;
  const required = c.approvals_required || 1;
  const who = (c.approvers || []).join(", ");
  return `${given} of ${required} approved${who ? ` (${who})` : ""}`;
}

// ---- Sign in ------------------------------------------------------------------

// page is the current page's part: load shows it for the stored token
// (false when the token was refused), clear forgets what it showed, landing
// returns the element that takes the focus once signed in.
let page = null;

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
  if (await page.load()) {
    say("Signed in.");
    page.landing().focus();
  }
}

async function signOut(message, isError) {
  if (!accessToken() && signedIn.signed_in) {
    await api("POST", "/auth/logout");
    signedIn = { signed_in: false };
  }
  sessionStorage.removeItem(TOKEN_KEY);
  showSignedIn(false);
  page.clear();
  (isError ? fail : say)(message);
  const first = $("token") || $("oidc-sign-in");
  if (first) {
    first.focus();
  }
}

// scopesOf is the scopes an /auth/session answer grants this page: those
// of the pasted token it carried, else the session's.
function scopesOf(who) {
  return who.ok && who.data && Array.isArray(who.data.scopes) ? who.data.scopes : [];
}

// isAdmin says whether the page may use billing:admin's calls (the audit
// log, approvals); the pages make no call the server is bound to refuse.
function isAdmin(who) {
  return scopesOf(who).includes("billing:admin");
}

// tokenRefused signs out when any of the answers refused the token.
function tokenRefused(responses) {
  if (!responses.some((r) => r.status === 401)) {
    return false;
  }
  signOut("Your sign-in was refused: it may have expired. Sign in again.", true);
  return true;
}

// startPage wires sign-in and sign-out and shows the page for a token this
// tab already holds.
async function startPage(part) {
  page = part;
  if ($("sign-in-form")) {
    $("sign-in-form").addEventListener("submit", signIn);
  }
  if ($("oidc-sign-in")) {
    $("oidc-sign-in").setAttribute("href", "/auth/login?return_to=" + encodeURIComponent(location.pathname));
  }
  $("sign-out").addEventListener("click", () => signOut("Signed out."));
  const who = await api("GET", "/auth/session");
  if (who.ok && who.data) {
    signedIn = who.data;
  }
  if (accessToken() || signedIn.signed_in) {
    page.load();
  } else {
    showSignedIn(false);
  }
}
