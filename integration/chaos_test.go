package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/billingd/billingd/internal/stripepay/stripepaytest"
)

// TestChaosInvariant: two replicas, many concurrent handshakes, a Stripe
// that fails, loses answers and answers slowly at random, and clients that
// give up at random. After a short settling time, for every org the changes
// that reached Stripe and the changes billingd recorded agree exactly (the
// plan, and one OPERATION_EXECUTED per change Stripe made), and no answer
// was a 500. Seeded (CHAOS_SEED) and bounded in time; tried this way on the
// code before unknown outcomes were settled, billingd forgot about one in
// ten changes Stripe applied.
func TestChaosInvariant(t *testing.T) {
	// Not parallel: seeded fault timings; left to the money-path owner.
	seed := uint64(20261122)
	if s, err := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("CHAOS_SEED=%d", seed)
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "1s"), withEnv("SETTLE_INTERVAL", "300ms"))
	replicas := []*harness{h, h.replica()}
	faults := &chaos{rng: rand.New(rand.NewPCG(seed, 1))}
	h.fake.SetChaos(faults.pick)

	const orgs = 12
	seen := runChaosClients(t, h, replicas, "chaos", orgs, 6, seed, 2)
	t.Logf("answers by status: %v", seen)
	if seen[http.StatusInternalServerError] > 0 {
		t.Errorf("%d answers were 500", seen[http.StatusInternalServerError])
	}

	// Settling time: answers Stripe gave but billingd still waits for (a
	// slow answer the client gave up on) are recorded within STRIPE_TIMEOUT,
	// unknown outcomes within a few SETTLE_INTERVALs. Then every org must
	// agree with Stripe.
	h.fake.SetChaos(nil)
	h.wantAgreement(t, "chaos", orgs, false)
}

// wantAgreement waits up to 30 seconds for every org prefix00, prefix01, …
// to agree with Stripe (disagreement; and, with receipts, to have every
// receipt), then fails the test with what still disagrees, and logs what
// the orgs scheduled and kept.
func (h *harness) wantAgreement(t *testing.T, prefix string, orgs int, receipts bool) {
	t.Helper()
	var disagreements []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		disagreements = disagreements[:0]
		for i := range orgs {
			org := fmt.Sprintf("%s%02d", prefix, i)
			d := h.disagreement(org)
			if d == "" && receipts {
				d = h.missingReceipts(org)
			}
			if d != "" {
				disagreements = append(disagreements, d)
			}
		}
		if len(disagreements) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, d := range disagreements {
		t.Error(d)
	}
	if scheduled := h.logScheduled(prefix); scheduled == 0 {
		t.Error("no change was scheduled for the period's end: the chaos did not reach that path")
	}
}

// runChaosClients creates the orgs prefix00, prefix01, … on h and runs one
// chaos client per org against replicas, rounds rounds each, seeded from
// seed (stream stream+i for org i); it returns the answers by status.
func runChaosClients(t *testing.T, h *harness, replicas []*harness, prefix string, orgs, rounds int, seed, stream uint64) map[int]int {
	var wg sync.WaitGroup
	statuses := make(chan int, orgs*rounds*4)
	for i := range orgs {
		org := fmt.Sprintf("%s%02d", prefix, i)
		h.createOrg(org, org, "pro")
		rng := rand.New(rand.NewPCG(seed, stream+uint64(i)))
		tok := h.user(org, "user-of-"+org)
		wg.Go(func() { chaosClient(t, replicas, tok, rng, rounds, statuses) })
	}
	wg.Wait()
	close(statuses)
	seen := map[int]int{}
	for s := range statuses {
		seen[s]++
	}
	return seen
}

// chaos picks the fault of each Stripe request, from one seeded source.
type chaos struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func (c *chaos) pick(e stripepaytest.Endpoint) stripepaytest.Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.rng.IntN(100)
	switch e {
	case stripepaytest.UpdateSubscription, stripepaytest.CreateSchedule, stripepaytest.UpdateSchedule,
		stripepaytest.ReleaseSchedule:
		switch {
		case n < 10:
			return stripepaytest.ServerError
		case n < 20:
			return stripepaytest.LoseResponse
		case n < 28:
			return stripepaytest.Delay(1500 * time.Millisecond) // longer than STRIPE_TIMEOUT
		case n < 34:
			return stripepaytest.Delay(300 * time.Millisecond)
		case n < 38:
			return stripepaytest.DropConnection
		case n < 42:
			return stripepaytest.Stall(700 * time.Millisecond)
		}
	case stripepaytest.GetSubscription, stripepaytest.CreatePreview:
		if n < 10 {
			return stripepaytest.ServerError
		}
	}
	return stripepaytest.NoFault
}

// chaosClient is one org's user: it proposes a random change, then confirms
// it with a client that may give up, retries or walks away, on a random
// replica each time.
func chaosClient(t *testing.T, replicas []*harness, tok string, rng *rand.Rand, rounds int, statuses chan<- int) {
	plans := []string{"free", "pro", "scale"}
	for range rounds {
		r := replicas[rng.IntN(len(replicas))]
		current := r.subscriptionOf(tok)
		to := plans[rng.IntN(len(plans))]
		op, at := "upgrade", ""
		if rankOf(to) < rankOf(current) {
			op = "downgrade"
			if rng.IntN(2) == 0 { // at the period's end; the next round may keep the plan
				at = `,"at":"period_end"`
			}
		}
		first, err := r.tryChange(5*time.Second, tok, op, `{"to":"`+to+`"`+at+`}`)
		if err != nil {
			continue
		}
		statuses <- first.Status
		if first.Status != http.StatusAccepted {
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			continue
		}
		var p proposal
		if err := first.decodeErr(&p); err != nil {
			t.Errorf("first call: %s: %v", first.Body, err)
			return
		}
		for attempt := 0; attempt < 1+rng.IntN(3); attempt++ {
			r := replicas[rng.IntN(len(replicas))]
			patience := time.Duration(100+rng.IntN(2000)) * time.Millisecond
			body := `{"to":"` + to + `"` + at + `,"confirm_token":"` + p.ConfirmToken + `"}`
			second, err := r.tryChange(patience, tok, op, body)
			if err != nil {
				continue // the client gave up
			}
			statuses <- second.Status
			if second.Status != http.StatusServiceUnavailable {
				break
			}
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
		}
	}
}

var planRank = map[string]int{"free": 0, "pro": 1, "scale": 2}

func rankOf(plan string) int { return planRank[plan] }

// tryChange posts body (JSON) to the handshake endpoint of op with a client
// that gives up after d.
func (h *harness) tryChange(d time.Duration, token, op, body string) (response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return h.tryPost(ctx, "/api/billing/"+op, token, json.RawMessage(body))
}

// subscriptionOf reads the plan without failing the test on a transient
// answer (the chaos clients call it from their own goroutines).
func (h *harness) subscriptionOf(token string) string {
	req, _ := http.NewRequest("GET", h.url+"/api/billing/subscription", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "pro"
	}
	defer resp.Body.Close()
	r, err := readResponse(resp)
	var sub struct{ Plan string }
	if err != nil || r.Status != http.StatusOK || r.decodeErr(&sub) != nil {
		return "pro"
	}
	return sub.Plan
}

// disagreement says how billingd's record of org differs from Stripe's, or
// "" when they agree: the same plan and the same scheduled change, one
// OPERATION_EXECUTED per executed confirmation, and as many changes made
// now at Stripe as billingd executed.
func (h *harness) disagreement(org string) string {
	h.t.Helper()
	var subID string
	var executedNow, executedConfirmations int
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT s.stripe_subscription_id,
			count(c.id) FILTER (WHERE NOT c.at_period_end AND c.from_plan <> c.to_plan), count(c.id)
		FROM subscriptions s LEFT JOIN confirmations c ON c.org = s.org AND c.status = 'executed'
		WHERE s.org = $1 GROUP BY 1`, org).Scan(&subID, &executedNow, &executedConfirmations); err != nil {
		h.t.Fatal(err)
	}
	stripeSub, _ := h.fake.Subscription(subID)
	stripePlan := planOfPrice(stripeSub.Items[0].PriceID)
	stripeScheduled := h.scheduledAtStripe(stripeSub)
	view := h.subscriptionView(h.user(org, "checker"))
	scheduled := "none"
	if sc := view.ScheduledChange; sc != nil {
		scheduled = sc.To + " at " + sc.At.UTC().Format(time.RFC3339)
	}
	executedEvents := 0
	for _, e := range h.auditEvents(org) {
		if e.Event == "OPERATION_EXECUTED" {
			executedEvents++
		}
	}
	if changes := h.fake.UpdateCount(subID); view.Plan != stripePlan || scheduled != stripeScheduled ||
		executedEvents != executedConfirmations || executedNow != changes {
		return fmt.Sprintf("%s: billingd shows %s (scheduled: %s) with %d executed changes (%d events, %d made now); "+
			"Stripe shows %s (scheduled: %s) after %d changes", org, view.Plan, scheduled, executedConfirmations,
			executedEvents, executedNow, stripePlan, stripeScheduled, changes)
	}
	return ""
}

// scheduledAtStripe is the change sub's schedule will make, as
// disagreement writes it: "plan at time" or "none".
func (h *harness) scheduledAtStripe(sub stripepaytest.Subscription) string {
	sch, ok := h.fake.Schedule(sub.Schedule)
	if !ok || sch.Current+1 >= len(sch.Phases) {
		return "none"
	}
	next := sch.Phases[sch.Current+1]
	if next.Items[0].PriceID == sub.Items[0].PriceID {
		return "none"
	}
	return planOfPrice(next.Items[0].PriceID) + " at " + next.Start.UTC().Format(time.RFC3339)
}

// logScheduled logs how many changes the orgs named prefix… scheduled for
// the period's end and how many kept the plan, so a run shows that chaos
// reached those paths too; it returns the first.
func (h *harness) logScheduled(prefix string) int {
	h.t.Helper()
	var scheduled, kept int
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT
			count(*) FILTER (WHERE at_period_end AND from_plan <> to_plan), count(*) FILTER (WHERE from_plan = to_plan)
		FROM confirmations WHERE org LIKE $1 || '%' AND status = 'executed'`, prefix).Scan(&scheduled, &kept); err != nil {
		h.t.Fatal(err)
	}
	h.t.Logf("executed: %d changes scheduled for the period's end, %d plans kept", scheduled, kept)
	return scheduled
}

func planOfPrice(price string) string {
	for _, p := range []string{"free", "pro", "scale"} {
		if price == "price_billingd_"+p {
			return p
		}
	}
	return price
}

// TestChaosWithReplicaKills: the chaos of TestChaosInvariant, served by
// two billingd serve processes on one database of which a killer SIGKILLs
// one at random every few hundred milliseconds and restarts it at once,
// with Stripe's events delivered late, shuffled and twice. After settling,
// for every org billingd's plan and executed changes equal Stripe's, every
// change Stripe made has its receipt, and nothing was made twice. Several
// seeds (CHAOS_SEED adds one).
func TestChaosWithReplicaKills(t *testing.T) {
	// Not parallel: kills processes at seeded moments.
	seeds := []uint64{20261124, 7}
	if s, err := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64); err == nil {
		seeds = append(seeds, s)
	}
	for _, seed := range seeds {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { chaosWithKills(t, seed) })
	}
}

func chaosWithKills(t *testing.T, seed uint64) {
	h := newHarness(t, withEnv("STRIPE_TIMEOUT", "1s"), withEnv("SETTLE_INTERVAL", "300ms"),
		withEnv("STRIPE_WEBHOOK_SECRET", webhookSecret))
	faults := &chaos{rng: rand.New(rand.NewPCG(seed, 1))}
	h.fake.SetChaos(faults.pick)
	addrs := []string{freeAddr(t), freeAddr(t)}
	procs := make([]*server, len(addrs))
	replicas := make([]*harness, len(addrs))
	for i, addr := range addrs {
		procs[i] = h.startServe(addr)
		r := *h
		r.url = "http://" + addr
		replicas[i] = &r
	}

	stop := make(chan struct{})
	var background sync.WaitGroup
	kills, killsInFlight := 0, 0
	var killerErr error
	bin := billingdBinary(t)
	background.Go(func() { // the killer: mostly while a Stripe request is under way
		rng := rand.New(rand.NewPCG(seed, 2))
		last := time.Now()
		for killerErr == nil {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			inFlight := h.fake.InFlight() > 0
			if !(inFlight && rng.IntN(4) == 0 || time.Since(last) > 1500*time.Millisecond) {
				continue
			}
			i := rng.IntN(len(procs))
			_ = procs[i].cmd.Process.Signal(syscall.SIGKILL)
			<-procs[i].done
			kills++
			if inFlight {
				killsInFlight++
			}
			procs[i], killerErr = h.launchServe(bin, addrs[i])
			last = time.Now()
		}
	})
	delivered := 0
	background.Go(func() { // Stripe's webhooks: late, shuffled, twice
		rng := rand.New(rand.NewPCG(seed, 3))
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			delivered = h.deliverShuffled(rng, delivered)
		}
	})

	const orgs = 8
	seen := runChaosClients(t, h, replicas, "killed", orgs, 10, seed, 10)
	close(stop)
	background.Wait()
	t.Logf("seed %d: %d kills (%d while a Stripe request was in flight); answers by status: %v", seed, kills, killsInFlight, seen)
	if killerErr != nil {
		t.Fatalf("restarting a killed replica: %v", killerErr)
	}
	if kills == 0 {
		t.Fatal("no replica was killed")
	}
	if seen[http.StatusInternalServerError] > 0 {
		t.Errorf("%d answers were 500", seen[http.StatusInternalServerError])
	}

	h.fake.SetChaos(nil)
	h.deliverShuffled(rand.New(rand.NewPCG(seed, 4)), 0) // every event once more, in another order
	h.wantAgreement(t, "killed", orgs, true)
}

// deliverShuffled delivers the fake's events from the from-th on, in a
// random order, each twice, to h; it returns how many events there were.
func (h *harness) deliverShuffled(rng *rand.Rand, from int) int {
	events := h.fake.Events()
	batch := events[from:]
	order := append(rng.Perm(len(batch)), rng.Perm(len(batch))...)
	for _, i := range order {
		h.deliver(batch[i])
	}
	return len(events)
}

// missingReceipts says how org's receipts fall short of its executed
// changes, or "".
func (h *harness) missingReceipts(org string) string {
	h.t.Helper()
	var receipts int
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM receipts WHERE org = $1`, org).Scan(&receipts); err != nil {
		h.t.Fatal(err)
	}
	executed := 0
	for _, e := range h.auditEvents(org) {
		if e.Event == "OPERATION_EXECUTED" {
			executed++
		}
	}
	if receipts != executed {
		return fmt.Sprintf("%s: %d receipts for %d executed changes", org, receipts, executed)
	}
	return ""
}
