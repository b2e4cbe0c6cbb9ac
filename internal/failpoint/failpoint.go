// Package failpoint arms the named steps of billingd's money path
// (billing.Step) from outside the process, for tests that drive real
// `billingd serve` processes: with BILLINGD_FAILPOINTS set to a
// controller's URL, the process asks the controller at every step what to
// do, and the controller does what the fault needs (cuts the database,
// makes Stripe fail, lets another caller in, renews the subscription) before
// it answers "continue" — or answers "kill", and the process SIGKILLs
// itself right there. Unset (production), no hook is installed and a step
// costs one nil check.
package failpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/billingd/billingd/billing"
)

// Request is what a process tells the controller at a step.
type Request struct {
	Step         string `json:"step"` // billing.Step.String()
	Org          string `json:"org,omitempty"`
	Confirmation string `json:"confirmation,omitempty"`
	Subscription string `json:"subscription,omitempty"`
	PID          int    `json:"pid"`
}

// Answer is what the controller tells the process to do.
type Answer struct {
	Action string `json:"action"` // ActionContinue or ActionKill
}

// The actions.
const (
	ActionContinue = "continue"
	ActionKill     = "kill"
)

// answerTimeout bounds how long a step waits for the controller: a fault
// that takes longer is a broken test, and the step goes on.
const answerTimeout = time.Minute

// Remote is a hook that asks the controller at url at every step. A
// controller that cannot be reached is logged and the step goes on.
func Remote(url string, log *slog.Logger) billing.StepHook {
	client := &http.Client{Timeout: answerTimeout}
	pid := os.Getpid()
	return func(ctx context.Context, at billing.StepEvent) {
		body, err := json.Marshal(Request{Step: at.Step.String(), Org: at.Org, Confirmation: at.Confirmation,
			Subscription: at.Subscription, PID: pid})
		if err != nil {
			return
		}
		// The step's own context may be the client's: the controller is
		// asked whatever happens to it.
		req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			log.Warn("failpoint controller", "err", err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			log.Warn("failpoint controller unreachable", "step", at.Step.String(), "err", err)
			return
		}
		defer resp.Body.Close()
		var answer Answer
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			log.Warn("failpoint controller answer", "err", err)
			return
		}
		if answer.Action == ActionKill {
			killSelf()
		}
	}
}

// killSelf ends the process as SIGKILL does, at this instant: no deferred
// function, no commit, no answer.
func killSelf() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	select {} // the signal is on its way
}
