package billing

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// summarize is the sentence a human reads before agreeing. It is built only
// from the confirmation's terms, so it states exactly what the second call
// executes, and it is deterministic: the same terms give the same text.
//
// cancelled names the plan of the scheduled change t cancels, if any.
func summarize(orgName string, op *operation, from, to Plan, t Terms, cancelled string) string {
	var text string
	if keepsPlan(t) {
		text = keepSummary(from, t, cancelled)
	} else {
		text = op.words(orgName, from, to, t)
	}
	if t.Cancels != nil && !keepsPlan(t) {
		text += fmt.Sprintf(" This cancels the change to %s scheduled for %s.", cancelled, day(t.Cancels.At))
	}
	if !t.Livemode {
		text += " " + TestModeNotice
	}
	return text
}

// keepSummary: keeping the current plan cancels the scheduled change.
func keepSummary(plan Plan, t Terms, cancelled string) string {
	return fmt.Sprintf("Keep %s: cancel the change to %s scheduled for %s. Nothing is charged now; %s (%s%s%s) continues, next charge on %s.",
		plan.Name, cancelled, day(t.Cancels.At), plan.Name, formatPrice(plan), perSeat(t), seatsPhrase(t), day(t.NextChargeAt))
}

// perSeat follows a plan's price when the subscription has several seats:
// the price is each seat's, and every amount stated counts them all.
func perSeat(t Terms) string {
	if seats(t.Quantity) > 1 {
		return " per seat"
	}
	return ""
}

// seatsPhrase names the seats a change keeps, when there are several.
func seatsPhrase(t Terms) string {
	if n := seats(t.Quantity); n > 1 {
		return fmt.Sprintf(", %d seats", n)
	}
	return ""
}

func day(t time.Time) string { return t.UTC().Format("Jan 2, 2006") }

// TestModeNotice ends every summary made with a test-mode payment key
// (contract §11), so nobody mistakes a rehearsal for a charge.
const TestModeNotice = "Test mode: no real money moves."

const maxDisplayNameRunes = 80

// DisplayName makes an org name safe to put in front of a human: control,
// format (zero-width, bidirectional overrides), private-use and
// variation-selector characters are removed, so a name cannot hide or
// reorder text in the summary; runs of white space become one space; long
// names are cut. It returns "" when nothing printable is left.
func DisplayName(name string) string {
	if !utf8.ValidString(name) {
		name = strings.ToValidUTF8(name, "")
	}
	var b strings.Builder
	pendingSpace := false
	runes := 0
	for _, r := range name {
		switch {
		case unicode.IsSpace(r) || unicode.In(r, unicode.Zl, unicode.Zp):
			pendingSpace = b.Len() > 0
			continue
		case invisible(r):
			continue
		}
		width := 1
		if pendingSpace {
			width = 2
		}
		if runes+width > maxDisplayNameRunes {
			b.WriteString("…")
			break
		}
		if pendingSpace {
			b.WriteByte(' ')
			pendingSpace = false
		}
		b.WriteRune(r)
		runes += width
	}
	return b.String()
}

func invisible(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs, unicode.Variation_Selector) ||
		r == '\u115F' || r == '\u1160' || r == '\u3164' || r == '\uFFA0' || // Hangul fillers render blank
		!unicode.IsPrint(r) && r != ' '
}

// scheduledWords names what a scheduled change changes to ("" for none):
// its plan's name (its id outside the catalog), with its seats when it
// schedules some ("Pro with 3 seats").
func (s *Service) scheduledWords(sc *ScheduledChange) string {
	if sc == nil {
		return ""
	}
	name := sc.ToPlan
	if p, ok := s.catalog.Plan(sc.ToPlan); ok {
		name = p.Name
	}
	if sc.Quantity > 0 {
		name += " with " + seatCount(sc.Quantity)
	}
	return name
}

func displayNameOr(o Org) string {
	if name := DisplayName(o.Name); name != "" {
		return name
	}
	return o.ID
}
