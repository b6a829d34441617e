package rebilltype

// MaxCustomerID is the longest customer id, in bytes.
const MaxCustomerID = 255

// ValidCustomerID reports whether s may be a customer id: the key that
// scopes API keys, lists and idempotency. One made only of spaces would
// look empty in every list and log.
func ValidCustomerID(s string) bool {
	return s != "" && len(s) <= MaxCustomerID && PrintableASCII(s) && HasVisible(s)
}
