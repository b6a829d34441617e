package registry

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// The forms of payment identifier a deployment may choose.
const (
	// PaymentIDHex is 32 hexadecimal digits of a hash: what the simulated
	// registry takes, and any party that assigns the registry's identifier
	// itself and takes rebill's only as its own reference.
	PaymentIDHex = "hex"
	// PaymentIDUIP is the 32-digit identifier a credit institution gives a
	// payment it accepts (УИП): "1", the BIK, the branch, a day, and a
	// number unique within the day. See docs/registry.md.
	PaymentIDUIP = "uip"
)

// PaymentIDs derives the registry's payment identifiers of postings. The
// zero value derives the hex form.
type PaymentIDs struct {
	Format string
	// BIK is the 9-digit bank identification code of the credit
	// institution that accepts the payments (uip only).
	BIK string
	// Branch is the number, up to 6 digits, of the institution's branch
	// that accepts them (uip only); empty: none.
	Branch string
}

// moscow is the zone of the day in a uip: the Bank of Russia's payment
// days are Moscow's (an assumption, see docs/registry.md). A fixed offset:
// Moscow has kept UTC+3 since 2014, and it spares a time zone database.
var moscow = time.FixedZone("MSK", 3*60*60)

// ID is the identifier of one attempt of a charge at one amount: the same
// for every retry of that posting, new for a new attempt or a new amount.
// day is a day that belongs to the charge itself (its period's or its
// bill's, never the clock's), so that an attempt held again on another
// day — after a database restore forgot the first posting while the
// registry kept it — gets the identifier the registry already has and is
// not posted twice. try 0 is the first choice; a further try is another
// identifier for the same posting, for when the first is already another
// posting's (a uip's number has 8 digits only).
func (f PaymentIDs) ID(chargeKey string, attempt int, amount int64, day time.Time, try int) string {
	if f.Format != PaymentIDUIP {
		if try == 0 {
			return PaymentID(chargeKey, attempt, amount)
		}
		sum := sha256.Sum256(fmt.Appendf(nil, "%s:a%d:%d:t%d", chargeKey, attempt, amount, try))
		return hex.EncodeToString(sum[:16])
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s:a%d:%d:t%d", chargeKey, attempt, amount, try))
	number := binary.BigEndian.Uint64(sum[:8]) % 100_000_000
	branch := f.Branch
	if len(branch) < 6 {
		branch = strings.Repeat("0", 6-len(branch)) + branch
	}
	return fmt.Sprintf("1%s%s%s%08d", f.BIK, branch, day.In(moscow).Format("02012006"), number)
}
