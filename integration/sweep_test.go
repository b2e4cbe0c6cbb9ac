package integration

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/billingd/billingd/billing"
	"github.com/billingd/billingd/internal/app"
	"github.com/billingd/billingd/internal/failpoint"
	"github.com/billingd/billingd/internal/postgres"
	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// The failpoint sweep: every operation × every named step of the money path
// it passes (billing.Paths) × every fault, against real PostgreSQL, the
// Stripe fake and two real `billingd serve` processes whose every step asks
// this test what to do (BILLINGD_FAILPOINTS). Each case runs one operation
// for an org of its own; when the armed step begins, the fault happens
// right there (the process SIGKILLed and restarted at once, the database's
// connections terminated, Stripe failing the next request, a webhook,
// a change in Stripe's dashboard, the renewal, the policy turning, another
// member's call), then the case is settled by any replica and judged by one
// oracle (sweep_oracle_test.go). SWEEP=full runs every case (.ci/run);
// otherwise a fixed slice runs (every step and every fault at least once).

// TestFailpointSweep runs the sweep. The cases run on SWEEP_SHARDS
// sweeps at once (default 2 for the slice, 4 for the full sweep; go test's
// -parallel must let as many run), each with its own PostgreSQL cluster, Stripe
// fake and processes: a case's fault (a SIGKILL, PostgreSQL restarted)
// touches only its own shard. Every shard then takes the next case from
// one queue, so a slow case does not hold up the others.
func TestFailpointSweep(t *testing.T) {
	// SWEEP_OPS keeps the operations whose names it matches, SWEEP_ONLY
	// the cases: to run again the cases a failure names, or the ones a
	// mutant must fail (integration/mutants).
	ops, err := regexp.Compile(os.Getenv("SWEEP_OPS"))
	if err != nil {
		t.Fatal(err)
	}
	only, err := regexp.Compile(os.Getenv("SWEEP_ONLY"))
	if err != nil {
		t.Fatal(err)
	}
	full := os.Getenv("SWEEP") == "full"
	shards := 2
	if full {
		shards = 4 // 3,140 cases: about a quarter of an hour with -race on 2 cores
	}
	if v := os.Getenv("SWEEP_SHARDS"); v != "" {
		if shards, err = strconv.Atoi(v); err != nil || shards < 1 {
			t.Fatalf("SWEEP_SHARDS=%q: want a positive number", v)
		}
	}
	var (
		planOnce sync.Once
		queue    = make(chan *sweepCase, 1<<16)
		mu       sync.Mutex
		sweeps   []*sweep
		ran      []*sweepCase
	)
	t.Run("shards", func(t *testing.T) {
		for k := range shards {
			t.Run(fmt.Sprint(k), func(t *testing.T) {
				// Each shard learns the operations' traces itself (no
				// shard waits for another: go test may run fewer at once
				// than asked); the first to know them fills the queue.
				t.Parallel()
				sw := newSweep(t)
				mu.Lock()
				sweeps = append(sweeps, sw)
				mu.Unlock()
				cases := sw.plan(full, ops)
				planOnce.Do(func() {
					defer close(queue)
					for _, sc := range cases {
						if only.MatchString(sc.String()) {
							queue <- sc
						}
					}
				})
				for sc := range queue {
					sw.run(sc)
					mu.Lock()
					ran = append(ran, sc)
					mu.Unlock()
				}
			})
		}
	})
	report(t, sweeps, ran, only.String() == "" && ops.String() == "")
}

// sweepOp is one operation the sweep runs: setup brings the org to where
// the operation starts (through the in-process replica, no failpoints),
// run makes the calls a client would and records every answer.
type sweepOp struct {
	name string
	plan string // the org's plan at the start
	// otherOp and otherTo are another member's pending change (default:
	// downgrade to free), which a fault may redeem.
	otherOp, otherTo string
	setup            func(sw *sweep, sc *sweepCase)
	run              func(sw *sweep, sc *sweepCase)
}

// sweepFault happens when the armed step begins; it returns the action the
// process takes (continue, or kill).
type sweepFault struct {
	name string
	fire func(sw *sweep, sc *sweepCase) string
}

// sweepCase is one operation, one armed step and one fault.
type sweepCase struct {
	op   sweepOp
	step billing.Step
	// passage is which time the case's calls reach step when the fault
	// fires: 1 the first, 2 the second (an owner's retry passes the
	// second call's steps again), …
	passage int
	fault   sweepFault
	n       int

	org, sub string
	payer    string // the member making the change (REST token)
	other    string // another member of the org (REST token)
	// otherToken is the other member's pending first call, made at setup,
	// which the fault "another member's second call" redeems.
	otherPending proposal

	mu        sync.Mutex
	fired     bool
	closed    bool     // the case's calls are over: its fault no longer fires
	reached   []string // the steps the case passed, in order
	answers   []sweepAnswer
	deniedAt  time.Time // when the policy turned to deny (fault policy)
	dashboard bool      // Stripe's dashboard changed the subscription
	renewed   bool      // the test clock renewed the subscription
	// adjusted is what a fault added to the next invoice an update makes.
	adjusted int64
	// faultCalls counts the faults firing and the calls they made that
	// may still be under way (under mu; see waitFaultCalls).
	faultCalls int
	// webhookLost: a delivery of Stripe's event got no 2xx, so Stripe
	// would deliver it again later.
	webhookLost bool
	// scheduledBefore is the change scheduled at Stripe when the operation
	// began ("" for none).
	scheduledBefore string
	// endsBefore is how the subscription ended when the operation began:
	// "period_end" for a pending cancellation (sweepState.ends).
	endsBefore string
	violations []string

	// The evidence (sweep_evidence_test.go): the writes to the
	// subscription before setupWrites were the setup's; the proposals
	// shown, by confirmation; the consents given; the approvals given, by
	// confirmation; the mandate granted.
	setupWrites int
	shown       map[string]proposal
	consents    []*sweepConsent
	approvals   map[string]time.Time
	mandate     *sweepMandateGiven
}

func (sc *sweepCase) String() string {
	at := sc.step.String()
	if sc.passage > 1 {
		at += fmt.Sprintf(" (passage %d)", sc.passage)
	}
	return fmt.Sprintf("#%d %s at %s with %s", sc.n, sc.op.name, at, sc.fault.name)
}

// sweepAnswer is an answer billingd gave during a case.
type sweepAnswer struct {
	who          string // which call: "first", "second", "mcp", "other first", …
	status       int    // HTTP status; 0: no answer (the process died)
	body         []byte
	confirmation string // the confirmation it is about, if known
	tokenHeld    bool   // the caller holds the confirmation's token
	// consent is the consent the call was made under (nil for a first
	// call, a policy change, an approval).
	consent *sweepConsent
	// stripe is Stripe's subscription the moment the answer arrived.
	stripe   sweepState
	sent, at time.Time
}

// sweep is the sweep's world: the harness (database, issuer, Stripe fake,
// an in-process replica), two billingd processes and the controller.
type sweep struct {
	t        *testing.T
	h        *harness
	replicas [2]*sweepReplica
	mu       sync.Mutex
	current  *sweepCase
	steps    map[string]int // how often each step was reached, by any case
	unlisted map[string]bool
	listed   map[string]bool
	// terminations: how often the connection fault fired, and how many of
	// the executions pool's connections it ended (report checks both).
	terminations, executionsEnded int
}

const (
	sweepStripeTimeout  = 1 * time.Second
	sweepSettleInterval = 250 * time.Millisecond
	// sweepSettleBound is oracle 6's bound beyond SETTLE_INTERVAL: a
	// request's outcome is certainly known 3×STRIPE_TIMEOUT after its
	// recovery point (billing.attemptOver), then a round takes a settle.
	sweepSettleBound = 3*sweepStripeTimeout + 5*time.Second
	sweepApplication = "billingd-sweep"
	sweepConfirmTTL  = 30 * time.Second
	// sweepRestoreBound bounds how long an owed restore takes: a few
	// settle rounds, each of which may wait STRIPE_TIMEOUT twice.
	sweepRestoreBound = 5 * (sweepSettleInterval + 2*sweepStripeTimeout)
)

// The sweep's catalog is in Kuwaiti dinars, which Stripe counts in
// thousandths (fils): every amount the person is shown must be written
// with Stripe's three digits (oracle 5).
const sweepCurrency = "kwd"

var sweepPrices = map[string]int64{"free": 0, "pro": 19_000, "scale": 49_000}

// sweepCatalog writes the sweep's catalog (PLANS_FILE): the default
// catalog's plans and price ids, in KWD.
func sweepCatalog(t *testing.T) string {
	var plans []map[string]any
	for _, id := range []string{"free", "pro", "scale"} {
		plans = append(plans, catalogPlan(id, sweepPrices[id], sweepCurrency, "price_billingd_"+id))
	}
	return writePlansFile(t, plans)
}

func newSweep(t *testing.T) *sweep {
	h := newHarness(t, withPrivatePostgres(), withEnv("PLANS_FILE", sweepCatalog(t)), withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret), withEnv("CONFIRM_TTL", sweepConfirmTTL.String()),
		withEnv("STRIPE_TIMEOUT", sweepStripeTimeout.String()))
	for id, amount := range sweepPrices {
		h.fake.SetPrice("price_billingd_"+id, amount, sweepCurrency)
	}
	sw := &sweep{t: t, h: h, steps: map[string]int{}, unlisted: map[string]bool{}, listed: map[string]bool{}}
	for _, path := range billing.Paths() {
		for _, step := range path {
			sw.listed[step.String()] = true
		}
	}
	ctl := httptest.NewServer(http.HandlerFunc(sw.control))
	t.Cleanup(ctl.Close)
	// The processes settle every SETTLE_INTERVAL; the in-process replica
	// (no failpoints) keeps the default 15 s, so that the processes, whose
	// steps the sweep sees, are the ones that settle.
	h.env["SETTLE_INTERVAL"] = sweepSettleInterval.String()
	h.env["BILLINGD_FAILPOINTS"] = ctl.URL
	// The processes' connections are the ones a fault terminates.
	h.env["DATABASE_URL"] += "&application_name=" + sweepApplication
	bin := billingdBinary(t)
	for i := range sw.replicas {
		sw.replicas[i] = startSweepReplica(t, h, bin, freeAddr(t))
	}
	sw.poison()
	return sw
}

// control answers a process at a step: the armed fault, or continue.
func (sw *sweep) control(w http.ResponseWriter, r *http.Request) {
	var req failpoint.Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sw.mu.Lock()
	sw.steps[req.Step]++
	if !sw.listed[req.Step] {
		sw.unlisted[req.Step] = true
	}
	sc := sw.current
	sw.mu.Unlock()
	action := failpoint.ActionContinue
	if sc != nil && (req.Org == sc.org || req.Subscription == sc.sub) {
		sc.mu.Lock()
		if !sc.closed { // the steps the case's own calls pass, not its late webhook's
			sc.reached = append(sc.reached, req.Step)
		}
		fire := !sc.fired && !sc.closed && req.Step == sc.step.String() && passages(sc.reached, req.Step) == max(sc.passage, 1)
		if fire {
			sc.fired = true
			sc.faultCalls++
		}
		sc.mu.Unlock()
		if fire {
			action = sc.fault.fire(sw, sc)
			sc.faultCallDone()
		}
	}
	_ = json.NewEncoder(w).Encode(failpoint.Answer{Action: action})
}

// run runs one case and judges it.
func (sw *sweep) run(sc *sweepCase) {
	sw.t.Helper()
	h := sw.h
	sc.org = fmt.Sprintf("sw%04d", sc.n)
	sc.shown, sc.approvals = map[string]proposal{}, map[string]time.Time{}
	var acct billing.Account
	sw.retry("create org", func() (err error) {
		acct, err = h.app.Service.CreateOrg(context.Background(), sc.org, "Sweep "+sc.org, "billing@"+sc.org+".example", sc.op.plan)
		return err
	})
	sc.sub = acct.Subscription.StripeSubscriptionID
	sc.payer = h.user(sc.org, "payer")
	sc.other = h.user(sc.org, "other")
	if sc.op.setup != nil {
		sc.op.setup(sw, sc)
	}
	otherOp, otherTo := cmp.Or(sc.op.otherOp, "downgrade"), cmp.Or(sc.op.otherTo, "free")
	sw.setupCall("POST", "/api/billing/"+otherOp, sc.other, map[string]string{"to": otherTo}, &sc.otherPending)
	sc.noteShown(sc.otherPending)
	sc.scheduledBefore = sw.scheduledAtStripe(sc.sub)
	if sub, ok := sw.h.fake.Subscription(sc.sub); ok {
		sc.endsBefore = sw.stripeNow(sub).ends
	}
	sc.setupWrites = len(h.fake.WritesFor(sc.sub))

	sw.mu.Lock()
	sw.current = sc
	sw.mu.Unlock()
	sc.op.run(sw, sc)
	sw.settle(sc)
	sw.mu.Lock()
	sw.current = nil
	sw.mu.Unlock()
	h.fake.ClearFaultsFor(sc.sub)
	h.fake.AdjustNextInvoice(0) // a fault's adjustment no update took

	sw.judge(sc)
	// Every fault's call is over (settle): the case is the test's alone.
	for _, v := range sc.violations {
		sw.t.Errorf("%s: %s", sc, v)
	}
	if len(sc.violations) > 0 { // what billingd answered, to read beside the violations
		for _, a := range sc.answers {
			sw.t.Logf("%s: the %s call was answered %d %s", sc, a.who, a.status, a.body)
		}
		sw.query(func(ctx context.Context) error {
			rows, err := sw.h.db.Pool.Query(ctx, `SELECT id, status, coalesce(failure, ''), restore_owed,
				coalesce(restore_settled, ''), restore_tries FROM confirmations WHERE org = $1 ORDER BY created_at`, sc.org)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id, status, failure, settled string
				var owed bool
				var tries int
				if err := rows.Scan(&id, &status, &failure, &owed, &settled, &tries); err != nil {
					return err
				}
				sw.t.Logf("%s: %s is %s %s (restore owed %v, settled %q, tries %d)", sc, id, status, failure, owed, settled, tries)
			}
			return rows.Err()
		})
		for _, w := range sw.caseWrites(sc) {
			sw.t.Logf("%s: Stripe: %s %s at %s (arrived %s): %s → %s", sc, w.Endpoint, w.Key, w.At.Format("15:04:05.000"),
				w.Arrived.Format("15:04:05.000"), stateAtStripe(w.Before), stateAtStripe(w.After))
		}
	}
}

// settle waits for every unknown outcome of the case to be settled (oracle
// 6), then delivers Stripe's latest event late, as Stripe would, and waits
// for billingd to show Stripe's subscription (oracle 1 then judges it).
func (sw *sweep) settle(sc *sweepCase) {
	sc.waitFaultCalls() // each ends: its client gives up after 30 s
	sw.healthy()
	// A request held at Stripe executes after billingd gave up on it: what
	// Stripe did is known once none is running (a few seconds at most).
	for deadline := time.Now().Add(sweepSettleBound); sw.h.fake.Running(sc.sub) > 0; {
		if time.Now().After(deadline) {
			sw.t.Fatalf("%s: a request to Stripe was still running after %s", sc, sweepSettleBound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	deadline := time.Now().Add(sweepSettleInterval + sweepSettleBound)
	for sw.executing(sc.org) > 0 {
		if time.Now().After(deadline) {
			sc.violate(6, "an unknown outcome was not settled within SETTLE_INTERVAL + %s", sweepSettleBound)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A scheduled change a change not made released, and that could not be
	// put back at once, is owed and put back by a settle round (contract
	// §6, billing/restore.go): the end state is the one after it.
	for deadline := time.Now().Add(sweepRestoreBound); sw.restoresOwed(sc.org) > 0; {
		if time.Now().After(deadline) {
			sc.violate(4, "a released scheduled change was still owed after %s", sweepRestoreBound)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Rule 1 holds on the path itself, before any late webhook makes
	// billingd read Stripe again; unless something billingd had no way to
	// see changed Stripe (the dashboard, the renewal), or a delivery failed
	// (Stripe delivers it again: the late webhook is part of the path).
	sc.mu.Lock()
	repairable := sc.dashboard || sc.renewed || sc.webhookLost
	sc.mu.Unlock()
	if d := sw.disagreement(sc); d != "" && !repairable {
		sc.violate(1, "before any late webhook: %s", d)
	}
	sc.mu.Lock()
	lost := sc.webhookLost
	sc.mu.Unlock()
	if !lost { // billingd's records already agree with Stripe, without a webhook's repair
		sw.explain(sc)
		sw.judgeRecords(sc, "before any late webhook: ")
	}
	// The late delivery is Stripe's, after every fault: a fault armed at a
	// webhook's step does not fire in it (there would be no delivery after).
	sc.mu.Lock()
	sc.closed = true
	sc.mu.Unlock()
	sc.waitFaultCalls() // a fault that fired at a settle round's step
	sw.deliverLate(sc, sw.replicas[1].url)
	for deadline := time.Now().Add(5 * time.Second); sw.disagreement(sc) != "" && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
}

// healthy waits until the test's pool, the in-process replica and the
// processes answer again: after PostgreSQL restarted, each connection they
// held fails once before it is replaced.
func (sw *sweep) healthy() {
	for _, r := range sw.replicas {
		r.waitReady(sw.t)
	}
	if err := untilReady(sw.h.url + "/readyz"); err != nil {
		sw.t.Fatal(err)
	}
}

// restoresOwed counts the org's confirmations owing back a scheduled change.
func (sw *sweep) restoresOwed(org string) int {
	var n int
	sw.query(func(ctx context.Context) error {
		return sw.h.db.Pool.QueryRow(ctx, `SELECT count(*) FROM confirmations WHERE org = $1 AND restore_owed`, org).Scan(&n)
	})
	return n
}

// executing counts the org's confirmations whose outcome is unknown.
func (sw *sweep) executing(org string) int {
	var n int
	sw.query(func(ctx context.Context) error {
		return sw.h.db.Pool.QueryRow(ctx, `SELECT count(*) FROM confirmations WHERE org = $1 AND status = 'executing'`, org).Scan(&n)
	})
	return n
}

// retry runs a step of a case's setup again while PostgreSQL's restart
// (an earlier case's fault) leaves a dead connection in a pool.
func (sw *sweep) retry(what string, fn func() error) {
	var err error
	for try := 0; try < 20; try++ {
		if err = fn(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	sw.t.Fatalf("%s: %v", what, err)
}

// withSeats gives the case's subscription n seats in Stripe's dashboard and
// delivers Stripe's event to the in-process replica, again after a 503
// (the fault of the case before may have restarted PostgreSQL) (setup).
func (sw *sweep) withSeats(sc *sweepCase, n int64) {
	sw.h.changeInDashboard(sc.sub, func(s *stripepaytest.Subscription) { s.Items[0].Quantity = n })
	events := sw.h.fake.Events()
	ev := events[len(events)-1]
	sw.retry("deliver the seats' event", func() error {
		if r := sw.h.deliver(ev); r.Status != http.StatusOK {
			return fmt.Errorf("status %d: %s", r.Status, r.Body)
		}
		return nil
	})
}

// setupCall is a call of a case's setup to the in-process replica (no
// failpoints), made again after a 503; into, if not nil, gets its answer.
func (sw *sweep) setupCall(method, path, token string, body, into any) {
	data, _ := json.Marshal(body)
	sw.retry(method+" "+path, func() error {
		req, _ := http.NewRequest(method, sw.h.url+path, bytes.NewReader(data))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			return fmt.Errorf("status %d: %s", resp.StatusCode, answer)
		}
		if into != nil {
			return json.Unmarshal(answer, into)
		}
		return nil
	})
}

// poison leaves, for the whole sweep, one executing confirmation that no
// settle can record (a trigger refuses every write of its row) and that is
// the oldest: oracle 6 asks that every other outcome is settled all the
// same.
func (sw *sweep) poison() {
	h := sw.h
	h.createOrg("swpoison", "Poisoned", "pro")
	p := h.propose(h.user("swpoison", "payer"), "upgrade", "scale")
	h.exec(sw.t, `UPDATE confirmations SET status = 'executing', attempted_at = now() - interval '1 day',
		sent_at = now() - interval '1 day' WHERE id = '`+p.ConfirmationID+`'`)
	h.exec(sw.t, `CREATE FUNCTION sweep_poisoned() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN RAISE EXCEPTION 'sweep: this row cannot be written'; END $$`)
	h.exec(sw.t, `CREATE TRIGGER sweep_poisoned BEFORE UPDATE ON confirmations FOR EACH ROW
		WHEN (OLD.id = '`+p.ConfirmationID+`') EXECUTE FUNCTION sweep_poisoned()`)
}

// waitFaultCalls waits until no fault of the case is firing and none of
// the calls they made is under way. A fault may fire at a settle round's
// step while the case is settled, until it is closed: counted under mu
// with closed, never after it.
func (sc *sweepCase) waitFaultCalls() {
	for {
		sc.mu.Lock()
		n := sc.faultCalls
		sc.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (sc *sweepCase) faultCallDone() {
	sc.mu.Lock()
	sc.faultCalls--
	sc.mu.Unlock()
}

func (sc *sweepCase) violate(oracle int, format string, args ...any) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.violations = append(sc.violations, fmt.Sprintf("oracle %d: ", oracle)+fmt.Sprintf(format, args...))
}

// stripeNow is Stripe's subscription sub in the oracle's terms: its plan,
// its seats, and the change of plan or seats its schedule will make.
func (sw *sweep) stripeNow(sub stripepaytest.Subscription) sweepState {
	now := sweepState{plan: planOfPrice(sub.Items[0].PriceID), seats: sub.Items[0].Quantity,
		ends: endsOf(sub.Status, sub.CancelAtPeriodEnd)}
	if sch, ok := sw.h.fake.Schedule(sub.Schedule); ok && sch.Current+1 < len(sch.Phases) {
		next := sch.Phases[sch.Current+1]
		if it := next.Items[0]; it.PriceID != sub.Items[0].PriceID || it.Quantity != sub.Items[0].Quantity {
			now.scheduled = planOfPrice(it.PriceID) + seatsSuffix(it.Quantity) + "@" + next.Start.UTC().Format(time.RFC3339)
		}
	}
	return now
}

// record keeps an answer, with Stripe's plan as it is the moment it arrived.
func (sw *sweep) record(sc *sweepCase, a sweepAnswer) sweepAnswer {
	a.at = time.Now()
	if sub, ok := sw.h.fake.Subscription(sc.sub); ok {
		a.stripe = sw.stripeNow(sub)
	}
	sc.mu.Lock()
	sc.answers = append(sc.answers, a)
	sc.mu.Unlock()
	return a
}

// call makes one REST call to base and records its answer; status 0: no
// answer (the process died).
func (sw *sweep) call(sc *sweepCase, who, base, method, path, token string, body any, confirmation string, held bool) sweepAnswer {
	a := sweepAnswer{who: who, confirmation: confirmation, tokenHeld: held}
	if held && confirmation != "" { // sending the token is the person's consent to what it showed
		sc.mu.Lock()
		shown := sc.shown[confirmation]
		sc.mu.Unlock()
		a.consent = sc.tokenConsent(who, shown)
	}
	return sw.send(sc, a, base, method, path, token, body)
}

// callUnder is an agent's call under a standing consent (a mandate, a
// policy that lets the change run at once): the request is the consent's.
func (sw *sweep) callUnder(sc *sweepCase, c sweepConsent, who, base, path, token string, body any) sweepAnswer {
	consent := sc.consentTo(c)
	a := sw.send(sc, sweepAnswer{who: who, consent: consent}, base, "POST", path, token, body)
	if claims, ok := a.claims(); ok && claims.Confirmation != "" {
		sc.mu.Lock()
		consent.confirmation = claims.Confirmation
		sc.mu.Unlock()
	}
	return a
}

// send makes one REST call to base and records its answer a.
func (sw *sweep) send(sc *sweepCase, a sweepAnswer, base, method, path, token string, body any) sweepAnswer {
	var reader io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, base+path, reader)
	if err != nil {
		sw.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second}
	a.sent = time.Now()
	if resp, err := client.Do(req); err == nil {
		a.status = resp.StatusCode
		a.body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	return sw.record(sc, a)
}

// askBody is the body of a call of op asking for to: a plan id, for
// "seats" the number of seats, for "cancel" and "resume" nothing (cancel's
// "at" says when).
func askBody(op, to, at string) map[string]any {
	body := map[string]any{"to": to}
	switch op {
	case "seats":
		n, _ := strconv.ParseInt(to, 10, 64)
		body = map[string]any{"quantity": n}
	case "cancel", "resume":
		body = map[string]any{}
	}
	if at != "" {
		body["at"] = at
	}
	return body
}

// firstCall is a first call by the payer to replica A.
func (sw *sweep) firstCall(sc *sweepCase, op, to, at string) (proposal, bool) {
	body := askBody(op, to, at)
	a := sw.call(sc, "first", sw.replicas[0].url, "POST", "/api/billing/"+op, sc.payer, body, "", false)
	var p proposal
	if a.status != http.StatusAccepted || json.Unmarshal(a.body, &p) != nil {
		return proposal{}, false
	}
	sc.mu.Lock()
	sc.answers[len(sc.answers)-1].confirmation = p.ConfirmationID
	sc.mu.Unlock()
	sc.noteShown(p)
	return p, true
}

// secondCall is the payer's second call to replica A, repeated as a client
// does: after no answer (the process died: once it is back) and as long as
// billingd answers 503 with Retry-After, a few times.
func (sw *sweep) secondCall(sc *sweepCase, op, to, at string, p proposal) {
	body := askBody(op, to, at)
	body["confirm_token"] = p.ConfirmToken
	for try := 0; try < 4; try++ {
		a := sw.call(sc, "second", sw.replicas[0].url, "POST", "/api/billing/"+op, sc.payer, body, p.ConfirmationID, true)
		switch {
		case a.status == 0:
			sw.replicas[0].waitReady(sw.t)
		case a.status == http.StatusServiceUnavailable || a.status == http.StatusConflict && strings.Contains(string(a.body), "approval_pending"):
			time.Sleep(time.Second)
		default:
			return
		}
	}
}

// handshake is a first call and, if it gave a token, its second call.
func (sw *sweep) handshake(sc *sweepCase, op, to, at string) {
	if p, ok := sw.firstCall(sc, op, to, at); ok {
		sw.secondCall(sc, op, to, at, p)
	}
}

// scheduleThrough schedules a downgrade at the period's end through the
// in-process replica (setup).
func (sw *sweep) scheduleThrough(sc *sweepCase, to string) { sw.scheduleOf(sc, "downgrade", to) }

// scheduleOf schedules op (downgrade, seats) of to at the period's end
// through the in-process replica (setup).
func (sw *sweep) scheduleOf(sc *sweepCase, op, to string) {
	var p proposal
	body := askBody(op, to, "period_end")
	sw.setupCall("POST", "/api/billing/"+op, sc.payer, body, &p)
	body["confirm_token"] = p.ConfirmToken
	sw.setupCall("POST", "/api/billing/"+op, sc.payer, body, nil)
}

// sweepOps are the operations: every way a change is asked for and made.
func sweepOps() []sweepOp {
	return []sweepOp{
		{name: "upgrade", plan: "pro", run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "upgrade", "scale", "") }},
		{name: "upgrade with 5 seats", plan: "pro", setup: func(sw *sweep, sc *sweepCase) { sw.withSeats(sc, 5) },
			run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "upgrade", "scale", "") }},
		{name: "downgrade now", plan: "scale", run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "downgrade", "pro", "") }},
		{name: "more seats", plan: "pro", setup: func(sw *sweep, sc *sweepCase) { sw.withSeats(sc, 2) },
			run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "seats", "5", "") }},
		{name: "fewer seats at period end", plan: "pro", setup: func(sw *sweep, sc *sweepCase) { sw.withSeats(sc, 5) },
			run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "seats", "2", "period_end") }},
		{name: "more seats cancelling a scheduled downgrade", plan: "scale",
			setup: func(sw *sweep, sc *sweepCase) { sw.withSeats(sc, 2); sw.scheduleThrough(sc, "pro") },
			run:   func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "seats", "3", "") }},
		{name: "cancel at period end", plan: "pro",
			run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "cancel", "", "period_end") }},
		{name: "cancel now", plan: "pro", setup: func(sw *sweep, sc *sweepCase) { sw.withSeats(sc, 2) },
			run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "cancel", "", "now") }},
		{name: "resume", plan: "pro", setup: func(sw *sweep, sc *sweepCase) { sw.scheduleOf(sc, "cancel", "") },
			run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "resume", "", "") }},
		{name: "cancel at period end while a downgrade is scheduled", plan: "scale",
			setup: func(sw *sweep, sc *sweepCase) { sw.scheduleThrough(sc, "pro") },
			run:   func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "cancel", "", "period_end") }},
		{name: "keeping seats over fewer seats scheduled", plan: "pro",
			setup: func(sw *sweep, sc *sweepCase) { sw.withSeats(sc, 5); sw.scheduleOf(sc, "seats", "2") },
			run:   func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "seats", "5", "") }},
		{name: "downgrade at period end", plan: "scale",
			run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "downgrade", "pro", "period_end") }},
		{name: "keep", plan: "scale", setup: func(sw *sweep, sc *sweepCase) { sw.scheduleThrough(sc, "pro") },
			run: func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "upgrade", "scale", "") }},
		{name: "upgrade cancelling a scheduled downgrade", plan: "pro",
			setup: func(sw *sweep, sc *sweepCase) { sw.scheduleThrough(sc, "free") },
			run:   func(sw *sweep, sc *sweepCase) { sw.handshake(sc, "upgrade", "scale", "") }},
		{name: "declined upgrade cancelling a scheduled downgrade", plan: "pro",
			setup: func(sw *sweep, sc *sweepCase) { sw.scheduleThrough(sc, "free") },
			run: func(sw *sweep, sc *sweepCase) {
				sw.h.fake.FailNextForAt(sc.sub, stripepaytest.UpdateSubscription, stripepaytest.DeclineCard)
				sw.handshake(sc, "upgrade", "scale", "")
			}},
		{name: "declined upgrade of 5 seats cancelling a scheduled downgrade", plan: "pro",
			setup: func(sw *sweep, sc *sweepCase) { sw.withSeats(sc, 5); sw.scheduleThrough(sc, "free") },
			run: func(sw *sweep, sc *sweepCase) {
				sw.h.fake.FailNextForAt(sc.sub, stripepaytest.UpdateSubscription, stripepaytest.DeclineCard)
				sw.handshake(sc, "upgrade", "scale", "")
			}},
		{name: "upgrade cancelling a scheduled downgrade, Stripe 5xx, settled by a replica", plan: "pro",
			setup: func(sw *sweep, sc *sweepCase) { sw.scheduleThrough(sc, "free") },
			run: func(sw *sweep, sc *sweepCase) {
				sw.h.fake.FailNextForAt(sc.sub, stripepaytest.UpdateSubscription, stripepaytest.ServerError)
				if p, ok := sw.firstCall(sc, "upgrade", "scale", ""); ok {
					sw.call(sc, "second", sw.replicas[0].url, "POST", "/api/billing/upgrade", sc.payer,
						map[string]string{"to": "scale", "confirm_token": p.ConfirmToken}, p.ConfirmationID, true)
				}
			}},
		{name: "allow", plan: "pro", otherOp: "upgrade", otherTo: "scale",
			setup: func(sw *sweep, sc *sweepCase) {
				sw.setupCall("PUT", "/api/billing/policy", sw.h.admin(sc.org, "policy-admin"),
					json.RawMessage(`{"rules":[{"name":"downgrades run at once","operation":"downgrade_plan","action":"allow"}]}`), nil)
			},
			run: func(sw *sweep, sc *sweepCase) {
				// The policy, set by a person, is the consent to this one
				// downgrade the agent asks for.
				sw.callUnder(sc, sweepConsent{kind: "allow", who: "allow", to: sweepState{plan: "free"}}, "allow",
					sw.replicas[0].url, "/api/billing/downgrade", sc.payer, map[string]string{"to": "free"})
			}},
		{name: "approval", plan: "pro",
			setup: func(sw *sweep, sc *sweepCase) {
				sw.setupCall("PUT", "/api/billing/policy", sw.h.admin(sc.org, "policy-admin"),
					json.RawMessage(`{"approval_window_seconds":120,"rules":[{"name":"upgrades need approval","operation":"upgrade_plan","action":"approve"}]}`), nil)
			},
			run: func(sw *sweep, sc *sweepCase) {
				p, ok := sw.firstCall(sc, "upgrade", "scale", "")
				if !ok {
					return
				}
				// The agent tries before anyone approved, as agents do:
				// nothing may reach Stripe (approval_pending).
				sw.call(sc, "early second", sw.replicas[0].url, "POST", "/api/billing/upgrade", sc.payer,
					map[string]string{"to": "scale", "confirm_token": p.ConfirmToken}, p.ConfirmationID, true)
				approver := sw.h.admin(sc.org, "approver") // a person: the harness's PERSON_CLIENTS client
				sc.approved(p.ConfirmationID)
				sw.call(sc, "approve", sw.replicas[1].url, "POST", "/api/billing/confirmations/"+p.ConfirmationID+"/approve",
					approver, nil, p.ConfirmationID, false)
				sw.secondCall(sc, "upgrade", "scale", "", p)
			}},
		{name: "elicitation over MCP", plan: "pro", run: func(sw *sweep, sc *sweepCase) { sw.elicit(sc) }},
		{name: "mandate", plan: "pro", setup: func(sw *sweep, sc *sweepCase) { sw.grantMandate(sc) },
			run: func(sw *sweep, sc *sweepCase) {
				// Covered, executed at once; then a change the mandate
				// covers only if the first was finally not made (its
				// spend given back): one change at most (oracle 7).
				sw.mandateCall(sc, "mandate", sw.replicas[0].url, "upgrade", "scale")
				sw.mandateCall(sc, "mandate again", sw.replicas[1].url, "downgrade", "free")
			}},
		{name: "upgrade, answer lost, settled by a replica", plan: "pro", run: func(sw *sweep, sc *sweepCase) {
			sw.h.fake.FailNextForAt(sc.sub, stripepaytest.UpdateSubscription, stripepaytest.LoseResponse)
			if p, ok := sw.firstCall(sc, "upgrade", "scale", ""); ok {
				sw.call(sc, "second", sw.replicas[0].url, "POST", "/api/billing/upgrade", sc.payer,
					map[string]string{"to": "scale", "confirm_token": p.ConfirmToken}, p.ConfirmationID, true)
			}
		}},
		{name: "upgrade, Stripe 5xx, settled by a replica", plan: "pro", run: func(sw *sweep, sc *sweepCase) {
			sw.h.fake.FailNextForAt(sc.sub, stripepaytest.UpdateSubscription, stripepaytest.ServerError)
			if p, ok := sw.firstCall(sc, "upgrade", "scale", ""); ok {
				sw.call(sc, "second", sw.replicas[0].url, "POST", "/api/billing/upgrade", sc.payer,
					map[string]string{"to": "scale", "confirm_token": p.ConfirmToken}, p.ConfirmationID, true)
			}
		}},
		{name: "upgrade, Stripe timeout, settled by the owner's retry", plan: "pro", run: func(sw *sweep, sc *sweepCase) {
			// The retry passes the second call's steps again (passage 2).
			sw.h.fake.FailNextForAt(sc.sub, stripepaytest.UpdateSubscription, stripepaytest.Delay(sweepStripeTimeout+500*time.Millisecond))
			sw.handshake(sc, "upgrade", "scale", "")
		}},
		{name: "upgrade, answer lost, settled by a webhook", plan: "pro", run: func(sw *sweep, sc *sweepCase) {
			sw.h.fake.FailNextForAt(sc.sub, stripepaytest.UpdateSubscription, stripepaytest.LoseResponse)
			if p, ok := sw.firstCall(sc, "upgrade", "scale", ""); ok {
				sw.call(sc, "second", sw.replicas[0].url, "POST", "/api/billing/upgrade", sc.payer,
					map[string]string{"to": "scale", "confirm_token": p.ConfirmToken}, p.ConfirmationID, true)
				sw.deliverLatest(sc, sw.replicas[1].url)
			}
		}},
		{name: "renewal applies a scheduled downgrade", plan: "scale",
			setup: func(sw *sweep, sc *sweepCase) { sw.scheduleThrough(sc, "pro") },
			run: func(sw *sweep, sc *sweepCase) {
				sw.renew(sc)
				// The database's clock has not moved with Stripe's test
				// clock: the row is made due, as the renewal's date passed.
				sw.query(func(ctx context.Context) error {
					_, err := sw.h.db.Pool.Exec(ctx, `UPDATE subscriptions SET scheduled = jsonb_set(scheduled, '{at}',
						to_jsonb(now() - interval '1 hour')) WHERE org = $1`, sc.org)
					return err
				})
				deadline := time.Now().Add(5 * time.Second)
				for sw.view(sc).ScheduledChange != nil && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
			}},
	}
}

// sweepMandate is the mandate the sweep's mandate operation grants the
// payer's agent: one change, to scale or free, within a budget.
var sweepMandate = mandateGrant{Client: "test-agent", Operations: []string{"upgrade_plan", "downgrade_plan"},
	ToPlans: []string{"scale", "free"}, MaxAmountDueCents: 40_000, BudgetCents: 40_000, MaxChanges: 1}

// grantMandate grants sweepMandate as the payer, a person freshly signed
// in (setup).
func (sw *sweep) grantMandate(sc *sweepCase) {
	g := sweepMandate
	g.ExpiresAt = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	var granted struct {
		ID string `json:"id"`
	}
	sw.setupCall("POST", "/api/billing/mandates", sw.h.personAt(sc.org, "payer", time.Now(), false), g, &granted)
	sc.mandate = &sweepMandateGiven{id: granted.ID, grant: g}
}

// mandateCall is the agent's request for a change the mandate may cover.
func (sw *sweep) mandateCall(sc *sweepCase, who, base, op, to string) {
	c := sc.consentTo(sweepConsent{kind: "mandate", who: who, to: sweepState{plan: to}})
	sc.mu.Lock()
	sc.mandate.requests = append(sc.mandate.requests, c)
	sc.mu.Unlock()
	a := sw.send(sc, sweepAnswer{who: who, consent: c}, base, "POST", "/api/billing/"+op, sc.payer, map[string]string{"to": to})
	if claims, ok := a.claims(); ok && claims.Confirmation != "" {
		sc.mu.Lock()
		c.confirmation = claims.Confirmation
		sc.mu.Unlock()
	}
}

// elicit asks for an upgrade over MCP from a client that shows the person
// a form and accepts it: billingd makes the second call itself.
func (sw *sweep) elicit(sc *sweepCase) {
	a := sweepAnswer{who: "mcp"}
	accept := answerWith("accept", map[string]any{"confirm": true})
	// The form is answered on the MCP session's goroutine, which may
	// outlive CallTool when the process dies: the consent is kept under
	// sc.mu.
	var consent *sweepConsent
	o := &host{h: sw.h, token: sc.payer, answer: func(p *sdk.ElicitParams) (*sdk.ElicitResult, error) {
		// Accepting the form is the person's consent to the change it
		// states.
		if m := summaryPlans.FindStringSubmatch(p.Message); m != nil {
			c := sc.consentTo(sweepConsent{kind: "elicitation", who: "mcp",
				from: sweepState{plan: strings.ToLower(m[1])}, to: sweepState{plan: strings.ToLower(m[2])}})
			sc.mu.Lock()
			consent = c
			sc.mu.Unlock()
		}
		return accept(p)
	}}
	opts := &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{Elicitation: formOnly}, ElicitationHandler: o.elicit}
	cs, err := mcpDialWith(sw.replicas[0].url, sw.h.mcpUser(sc.org, "payer"), "2025-11-25", opts, false)
	a.sent = time.Now()
	if err == nil {
		defer cs.Close()
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "upgrade_plan", Arguments: map[string]any{"to": "scale"}})
		if err == nil {
			a.status = http.StatusOK
			if res.IsError {
				a.status = http.StatusConflict
			}
			a.body, _ = json.Marshal(res.StructuredContent)
			if len(a.body) == 0 || string(a.body) == "null" {
				a.body = []byte(strings.Join(texts(res), "\n"))
			}
		}
	}
	sc.mu.Lock()
	a.consent = consent
	if claims, ok := a.claims(); ok && claims.Confirmation != "" && a.consent != nil {
		a.consent.confirmation = claims.Confirmation
	}
	sc.mu.Unlock()
	sw.record(sc, a)
}

// renew renews the subscription at Stripe now, as its test clock would at
// the period's end: a scheduled change applies.
func (sw *sweep) renew(sc *sweepCase) {
	sw.h.fake.RenewNow(sc.sub)
	sc.mu.Lock()
	sc.renewed = true
	sc.mu.Unlock()
}

// deliverLatest delivers the latest Stripe event about the case's
// subscription to base, as Stripe does (late, perhaps again).
func (sw *sweep) deliverLatest(sc *sweepCase, base string) {
	if events := sw.eventsAbout(sc); len(events) > 0 {
		sw.deliverEvent(sc, base, events[len(events)-1])
	}
}

// deliverLate delivers, once the case is over, every event about its
// subscription newest first (out of order, as Stripe may), then the newest
// again (twice, as Stripe may).
func (sw *sweep) deliverLate(sc *sweepCase, base string) {
	events := sw.eventsAbout(sc)
	for i := len(events) - 1; i >= 0; i-- {
		sw.deliverEvent(sc, base, events[i])
	}
	sw.deliverLatest(sc, base)
}

// eventsAbout lists Stripe's events about the case's subscription, oldest
// first.
func (sw *sweep) eventsAbout(sc *sweepCase) []stripepaytest.Event {
	var out []stripepaytest.Event
	for _, ev := range sw.h.fake.Events() {
		if bytes.Contains(ev.Payload, []byte(`"`+sc.sub+`"`)) {
			out = append(out, ev)
		}
	}
	return out
}

// deliverEvent delivers ev to base, noting a delivery billingd did not take
// during the case (Stripe delivers it again later).
func (sw *sweep) deliverEvent(sc *sweepCase, base string, ev stripepaytest.Event) {
	if !deliver(base, signedWebhook(ev)) {
		sc.mu.Lock()
		sc.webhookLost = sc.webhookLost || !sc.closed
		sc.mu.Unlock()
	}
}

// sweepFaults are the faults, each brought about when the armed step
// begins.
func sweepFaults() []sweepFault {
	stripe := func(name string, f stripepaytest.Fault) sweepFault {
		return sweepFault{name: name, fire: func(sw *sweep, sc *sweepCase) string {
			sw.h.fake.FailNextFor(sc.sub, f)
			return failpoint.ActionContinue
		}}
	}
	// async lets the fault's call go on without the step: the call may
	// wait for a lock the paused step holds. It waits a while for it.
	// The case waits for every such call before it is judged (sweep.settle).
	async := func(sc *sweepCase, fn func()) {
		done := make(chan struct{})
		sc.mu.Lock()
		sc.faultCalls++
		sc.mu.Unlock()
		go func() { defer sc.faultCallDone(); defer close(done); fn() }()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	}
	restartPostgres := func(sw *sweep, sc *sweepCase) {
		if err := sw.h.pg.Restart(context.Background()); err != nil {
			sw.t.Errorf("%s: %v", sc, err)
		}
	}
	dashboard := func(sw *sweep, sc *sweepCase) {
		_ = sw.h.fake.ChangeInDashboard(sc.sub, func(s *stripepaytest.Subscription) { s.Items[0].PriceID = "price_billingd_free" })
		sc.mu.Lock()
		sc.dashboard = true
		sc.mu.Unlock()
	}
	return []sweepFault{
		{name: "SIGKILL", fire: func(*sweep, *sweepCase) string { return failpoint.ActionKill }},
		{name: "PostgreSQL restarted", fire: func(sw *sweep, sc *sweepCase) string {
			restartPostgres(sw, sc)
			return failpoint.ActionContinue
		}},
		{name: "database connections terminated", fire: func(sw *sweep, sc *sweepCase) string {
			// Both pools: "billingd-sweep" and "billingd-sweep executions".
			var terminated, executions int
			err := sw.h.db.Pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE ended), count(*) FILTER (WHERE ended AND application_name = $2)
				FROM (SELECT application_name, pg_terminate_backend(pid) AS ended -- once per backend, after WHERE
					FROM pg_stat_activity WHERE `+postgres.ReplicaBackends+`) AS replicas`,
				sweepApplication, postgres.PoolName(sweepApplication, app.ExecutionsPool)).Scan(&terminated, &executions)
			if err != nil || terminated == 0 {
				// The processes' pools keep the connections they opened at
				// start (both are pinged then, and /readyz pings the main
				// pool after every case; pgx closes idle ones after 30
				// minutes), so a fault that ends none is not the fault it
				// claims to be: its name no longer matches theirs.
				sw.t.Errorf("%s: terminated %d of the replicas' connections: %v", sc, terminated, err)
			}
			// The executions pool opens its connections again only for a
			// second call, so a single case may find none of it; report
			// wants some over the sweep.
			sw.mu.Lock()
			sw.terminations++
			sw.executionsEnded += executions
			sw.mu.Unlock()
			return failpoint.ActionContinue
		}},
		stripe("Stripe 5xx", stripepaytest.ServerError),
		stripe("Stripe timeout", stripepaytest.Delay(sweepStripeTimeout+500*time.Millisecond)),
		// Still running at Stripe when billingd, timed out, reads back.
		stripe("Stripe stalls", stripepaytest.Linger(sweepStripeTimeout*5/2)),
		stripe("Stripe applies then errs", stripepaytest.ApplyThenServerError),
		stripe("Stripe 429", stripepaytest.RateLimited),
		stripe("Stripe declines", stripepaytest.DeclineCard),
		{name: "invoice differs from the quote", fire: func(sw *sweep, sc *sweepCase) string {
			// A tax rate or a discount changed after the quote: the next
			// invoice an update makes is 1.234 KWD more than previewed.
			sw.h.fake.AdjustNextInvoice(1234)
			sc.mu.Lock()
			sc.adjusted = 1234
			sc.mu.Unlock()
			return failpoint.ActionContinue
		}},
		{name: "webhook", fire: func(sw *sweep, sc *sweepCase) string {
			// An event about the subscription as it is right now, which
			// billingd must not record over a change it is making.
			sw.h.fake.Touch(sc.sub)
			async(sc, func() { sw.deliverLatest(sc, sw.replicas[1].url) })
			return failpoint.ActionContinue
		}},
		{name: "change in Stripe's dashboard", fire: func(sw *sweep, sc *sweepCase) string {
			dashboard(sw, sc)
			return failpoint.ActionContinue
		}},
		// Compound faults.
		{name: "dashboard change and its webhook", fire: func(sw *sweep, sc *sweepCase) string {
			dashboard(sw, sc)
			async(sc, func() { sw.deliverLatest(sc, sw.replicas[1].url) })
			return failpoint.ActionContinue
		}},
		{name: "SIGKILL and PostgreSQL restarted", fire: func(sw *sweep, sc *sweepCase) string {
			restartPostgres(sw, sc)
			return failpoint.ActionKill
		}},
		{name: "renewal and a late webhook", fire: func(sw *sweep, sc *sweepCase) string {
			sw.renew(sc)
			async(sc, func() { sw.deliverLatest(sc, sw.replicas[1].url) })
			return failpoint.ActionContinue
		}},
		{name: "renewal", fire: func(sw *sweep, sc *sweepCase) string {
			sw.renew(sc)
			return failpoint.ActionContinue
		}},
		{name: "policy turns to deny", fire: func(sw *sweep, sc *sweepCase) string {
			async(sc, func() { sw.denyAll(sc) })
			return failpoint.ActionContinue
		}},
		// The consent lapses while the request is still running at
		// Stripe: billingd may call it not made only once it is over.
		{name: "Stripe stalls and the policy turns to deny", fire: func(sw *sweep, sc *sweepCase) string {
			sw.h.fake.FailNextFor(sc.sub, stripepaytest.Linger(sweepStripeTimeout*5/2))
			async(sc, func() { sw.denyAll(sc) })
			return failpoint.ActionContinue
		}},
		{name: "another member's first call", fire: func(sw *sweep, sc *sweepCase) string {
			async(sc, func() {
				a := sw.call(sc, "other first", sw.replicas[1].url, "POST", "/api/billing/downgrade", sc.other,
					map[string]string{"to": "free"}, "", false)
				var p proposal
				if a.status == http.StatusAccepted && json.Unmarshal(a.body, &p) == nil {
					sc.noteShown(p)
					sc.mu.Lock()
					for i := range sc.answers {
						if sc.answers[i].who == "other first" {
							sc.answers[i].confirmation = p.ConfirmationID
						}
					}
					sc.mu.Unlock()
				}
			})
			return failpoint.ActionContinue
		}},
		{name: "another member's second call", fire: func(sw *sweep, sc *sweepCase) string {
			async(sc, func() {
				op := cmp.Or(sc.op.otherOp, "downgrade")
				sw.call(sc, "other second", sw.replicas[1].url, "POST", "/api/billing/"+op, sc.other,
					map[string]string{"to": sc.otherPending.Details.To, "confirm_token": sc.otherPending.ConfirmToken},
					sc.otherPending.ConfirmationID, true)
			})
			return failpoint.ActionContinue
		}},
	}
}

// denyAll turns the org's policy to deny every change, as a person (an
// admin) would.
func (sw *sweep) denyAll(sc *sweepCase) {
	sw.call(sc, "policy", sw.replicas[1].url, "PUT", "/api/billing/policy", sw.h.admin(sc.org, "policy-admin"),
		map[string]any{"rules": []map[string]string{{"name": "no changes", "action": "deny"}}}, "", false)
	sc.mu.Lock()
	sc.deniedAt = time.Now()
	sc.mu.Unlock()
}

// plan lists the cases. Each operation is first run once with no fault, to
// learn the steps it passes (its trace); every step of it is then armed
// with every fault (full), or, in the fixed slice, every fault at every
// class of step at least once (sweepClasses: the coverage matrix), each
// time in another operation, and every step of every operation once.
func (sw *sweep) plan(full bool, ops *regexp.Regexp) []*sweepCase {
	type armed struct {
		op      sweepOp
		step    string
		passage int
	}
	var all []armed
	faults := sweepFaults()
	n := 0
	for _, op := range sweepOps() {
		if !ops.MatchString(op.name) {
			continue
		}
		n++
		dry := &sweepCase{op: op, n: n, fault: sweepFault{name: "no fault"}}
		sw.run(dry)
		for i, step := range dry.reached { // each step, and its second passage (an owner's retry)
			if passage := passages(dry.reached[:i+1], step); passage <= 2 {
				all = append(all, armed{op, step, passage})
			}
		}
	}
	picked := map[[2]int]bool{} // (armed, fault)
	if full {
		for i := range all {
			for j := range faults {
				picked[[2]int{i, j}] = true
			}
		}
	} else {
		for j := range faults {
			for k, class := range sweepClasses {
				var in []int
				for i, a := range all {
					if stepClass(a.step) == class {
						in = append(in, i)
					}
				}
				if len(in) > 0 { // each fault meets the class in another operation
					picked[[2]int{in[(j*len(sweepClasses)+k)%len(in)], j}] = true
				}
			}
		}
		for i := range all { // every step of every operation once
			armedOnce := false
			for j := range faults {
				armedOnce = armedOnce || picked[[2]int{i, j}]
			}
			if !armedOnce {
				picked[[2]int{i, i % len(faults)}] = true
			}
		}
	}
	var cases []*sweepCase
	for i, a := range all {
		for j, f := range faults {
			if picked[[2]int{i, j}] {
				n++
				cases = append(cases, &sweepCase{op: a.op, step: stepNamed(a.step), passage: a.passage, fault: f, n: n})
			}
		}
	}
	return cases
}

// sweepClasses are the classes of the money path's steps that the slice
// puts every fault at.
var sweepClasses = []string{"first call", "before the recovery point", "after the recovery point", "at Stripe",
	"after Stripe", "settle", "webhook", "period end"}

// stepClass is the class of a step: where on the money path it is.
func stepClass(step string) string {
	switch step {
	case "first_call/quote", "first_call/issue":
		return "first call"
	case "second_call/consume", "second_call/check_at_provider", "second_call/recovery_point":
		return "before the recovery point"
	case "second_call/send":
		return "after the recovery point"
	case "period_end/release", "period_end/schedule_create", "period_end/phases", "period_end/keep":
		return "at Stripe" // between the Stripe requests of one change
	case "second_call/record", "second_call/commit":
		return "after Stripe"
	case "period_end/restore", "period_end/renewal":
		return "period end"
	}
	path, _, _ := strings.Cut(step, "/")
	return map[string]string{"settle": "settle", "webhook": "webhook"}[path]
}

// coverage is the matrix of the cases run: for each fault and class of
// step, how many cases armed it there and in how many the step was
// reached (the fault fired).
func coverage(cases []*sweepCase) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-42s", "fault \\ class: fired/armed")
	for _, class := range sweepClasses {
		fmt.Fprintf(&b, " | %s", class)
	}
	b.WriteString("\n")
	for _, f := range sweepFaults() {
		fmt.Fprintf(&b, "%-42s", f.name)
		for _, class := range sweepClasses {
			armed, fired := 0, 0
			for _, sc := range cases {
				if sc.fault.name == f.name && stepClass(sc.step.String()) == class {
					armed++
					if sc.fired {
						fired++
					}
				}
			}
			fmt.Fprintf(&b, " | %*s", len(class), fmt.Sprintf("%d/%d", fired, armed))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// passages counts how often step was reached in reached.
func passages(reached []string, step string) int {
	n := 0
	for _, s := range reached {
		if s == step {
			n++
		}
	}
	return n
}

func stepNamed(name string) billing.Step {
	for _, path := range billing.Paths() {
		for _, s := range path {
			if s.String() == name {
				return s
			}
		}
	}
	path, step, _ := strings.Cut(name, "/")
	return billing.Step{Path: path, Name: step}
}

// report prints how many cases ran and fails for steps the sweep was not
// told of (billing.Paths) and listed steps no case reached, in any shard.
func report(t *testing.T, sweeps []*sweep, cases []*sweepCase, all bool) {
	sort.Slice(cases, func(i, j int) bool { return cases[i].n < cases[j].n })
	fired := 0
	for _, sc := range cases {
		if sc.fired {
			fired++
		}
	}
	reached, unlisted, listed := map[string]int{}, map[string]bool{}, map[string]bool{}
	terminations, executionsEnded := 0, 0
	for _, sw := range sweeps {
		// The processes' settle rounds still ask the controller, which
		// counts under sw.mu.
		sw.mu.Lock()
		for step, n := range sw.steps {
			reached[step] += n
		}
		maps.Copy(unlisted, sw.unlisted)
		maps.Copy(listed, sw.listed)
		terminations, executionsEnded = terminations+sw.terminations, executionsEnded+sw.executionsEnded
		sw.mu.Unlock()
	}
	if terminations > 0 && executionsEnded == 0 {
		// A second call's transactions run on the executions pool: a
		// connection fault that never reaches it leaves them uncut.
		t.Errorf("the connection fault fired %d times and ended none of the executions pool's connections (%q)",
			terminations, postgres.PoolName(sweepApplication, app.ExecutionsPool))
	}
	line := fmt.Sprintf("failpoint sweep: %d cases run on %d shards (%d operations × the steps each passes × %d faults%s; "+
		"the armed step reached in %d), %d distinct steps reached", len(cases), len(sweeps), len(sweepOps()), len(sweepFaults()),
		map[bool]string{true: "", false: ", a fixed slice"}[os.Getenv("SWEEP") == "full"], fired, len(reached))
	matrix := coverage(cases)
	for _, sc := range cases {
		if !sc.fired {
			matrix += "armed step not reached: " + sc.String() + "\n"
		}
	}
	t.Log(line + "\n" + matrix)
	// go test shows a passing package's output only with -v: make test
	// prints this line from the file it names.
	if path := os.Getenv("SWEEP_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(line+"\n"+matrix), 0o644); err != nil {
			t.Error(err)
		}
	}
	for step := range unlisted {
		t.Errorf("step %s is not in billing.Paths: the sweep would not arm it", step)
	}
	for step := range listed {
		if all && reached[step] == 0 {
			t.Errorf("step %s was reached by no case: no operation of the sweep passes it", step)
		}
	}
}
