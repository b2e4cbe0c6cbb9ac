package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// DefaultSchedule is how long a delivery waits after each failed attempt
// before the next (Svix's schedule: the first attempt is immediate, then
// 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h): eight attempts over 27.6
// hours, then it is failed.
var DefaultSchedule = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute,
	2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// Defaults of a Deliverer.
const (
	DefaultTimeout = 10 * time.Second
	DefaultWorkers = 8
	DefaultPoll    = time.Second
	// leaseMargin is how much longer than the request's timeout a claim
	// lasts. The send is over when Timeout is (the client's timeout covers
	// connecting and reading the answer), so no other replica sends while
	// it may still be going on; should recording its outcome take longer
	// than the margin, the delivery is sent once more, after it: at least
	// once, never twice at the same time.
	leaseMargin = 2 * time.Second
	// keepFinished is how long delivered and failed deliveries stay for
	// the dashboard.
	keepFinished = 7 * 24 * time.Hour
)

// Deliverer sends the outbox's due deliveries. Every replica runs one;
// the store's claims keep them from sending one delivery twice at once.
type Deliverer struct {
	Store Store
	Links Links
	Guard Guard
	// Timeout bounds one attempt, connection included.
	Timeout time.Duration
	// Schedule: the wait after each failed attempt; after the last, failed.
	Schedule []time.Duration
	// Workers bounds the attempts in flight in this replica.
	Workers int
	// Poll is how often the outbox is asked for due deliveries.
	Poll time.Duration
	Log  *slog.Logger
	// Observe, when set, is told each attempt's outcome (delivered,
	// retrying, failed).
	Observe func(outcome string)
	// Now is the clock of Slack countdowns; nil: time.Now.
	Now func() time.Time

	once   sync.Once
	client *http.Client
}

func (d *Deliverer) init() {
	d.once.Do(func() {
		if d.Timeout <= 0 {
			d.Timeout = DefaultTimeout
		}
		if d.Schedule == nil {
			d.Schedule = DefaultSchedule
		}
		if d.Workers <= 0 {
			d.Workers = DefaultWorkers
		}
		if d.Poll <= 0 {
			d.Poll = DefaultPoll
		}
		if d.Log == nil {
			d.Log = slog.New(slog.DiscardHandler)
		}
		if d.Now == nil {
			d.Now = time.Now
		}
		d.client = d.Guard.Client(d.Timeout)
	})
}

func (d *Deliverer) lease() time.Duration { return d.Timeout + leaseMargin }

// Run delivers until ctx ends, with at most Workers attempts in flight,
// then waits for those in flight (each bounded by Timeout).
func (d *Deliverer) Run(ctx context.Context) {
	d.init()
	slots := make(chan struct{}, d.Workers)
	freed := make(chan struct{}, 1)
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	poll := time.NewTicker(d.Poll)
	defer poll.Stop()
	purge := time.NewTicker(time.Hour)
	defer purge.Stop()
	for {
		if free := d.Workers - len(slots); free > 0 {
			claimed, err := d.Store.ClaimDeliveries(ctx, free, d.lease())
			if err != nil && ctx.Err() == nil {
				d.Log.Warn("claiming webhook deliveries failed; will retry", "err", err)
			}
			for _, del := range claimed {
				slots <- struct{}{}
				inFlight.Add(1)
				go func() {
					defer inFlight.Done()
					d.deliver(ctx, del)
					<-slots
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		case <-freed:
		case <-purge.C:
			if _, err := d.Store.PurgeDeliveries(ctx, keepFinished); err != nil {
				d.Log.Warn("purging finished webhook deliveries failed", "err", err)
			}
		}
	}
}

// RunOnce claims what is due now and delivers it before returning: for
// tests and tools. It returns how many it attempted.
func (d *Deliverer) RunOnce(ctx context.Context) (int, error) {
	d.init()
	claimed, err := d.Store.ClaimDeliveries(ctx, d.Workers, d.lease())
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, del := range claimed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.deliver(ctx, del)
		}()
	}
	wg.Wait()
	return len(claimed), nil
}

// deliver makes one attempt and records its outcome. Neither depends on
// ctx ending: an attempt that went out is recorded (bounded by the lease).
func (d *Deliverer) deliver(ctx context.Context, del Delivery) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.lease())
	defer cancel()
	httpStatus, err := d.send(ctx, del)
	o := Outcome{DeliveryID: del.ID, Lease: del.Lease, HTTPStatus: httpStatus, Status: StatusDelivered}
	if err != nil {
		o.Error = truncate(err.Error(), 300)
		if del.Attempt <= len(d.Schedule) {
			o.Status, o.RetryAfter = StatusPending, d.Schedule[del.Attempt-1]
		} else {
			o.Status = StatusFailed
		}
	}
	if err := d.Store.RecordOutcome(ctx, o); err != nil {
		// The lease ends and the delivery is sent again: at least once.
		d.Log.Warn("recording a webhook delivery's outcome failed", "delivery", del.ID, "err", err)
	}
	outcome := map[string]string{StatusDelivered: "delivered", StatusPending: "retrying", StatusFailed: "failed"}[o.Status]
	if d.Observe != nil {
		d.Observe(outcome)
	}
	if o.Status != StatusDelivered {
		d.Log.Info("webhook delivery not accepted", "delivery", del.ID, "event", del.EventID, "type", del.Type,
			"attempt", del.Attempt, "outcome", outcome, "http_status", httpStatus, "err", o.Error)
	}
}

// errNotAccepted: the receiver answered, but not with 2xx.
var errNotAccepted = errors.New("the receiver did not answer 2xx")

// send POSTs the delivery's body; nil error only for a 2xx answer.
func (d *Deliverer) send(ctx context.Context, del Delivery) (int, error) {
	u, err := url.Parse(del.URL)
	if err != nil || u.Scheme != "https" && !(d.Guard.AllowPrivate && u.Scheme == "http") {
		return 0, errors.New("the endpoint's URL is no longer allowed (https only)")
	}
	body, err := d.body(del)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, del.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	ts := time.Now()
	sig, err := Sign(del.Secrets, del.EventID, ts, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "billingd-webhooks")
	req.Header.Set("webhook-id", del.EventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := d.client.Do(req)
	if err != nil {
		// Not the *url.Error itself: it names the URL, and a Slack
		// incoming-webhook URL is a secret (this error is logged).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, fmt.Errorf("send: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("%w: HTTP %d", errNotAccepted, resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// body is the delivery's body in its endpoint's format.
func (d *Deliverer) body(del Delivery) ([]byte, error) {
	if del.Format == FormatSlack {
		return slackBody(del, d.Links, d.Now())
	}
	return standardBody(del, d.Links)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
