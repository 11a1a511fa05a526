package replay

import (
	"fmt"
	"regexp"
)

// maxOperatorLen bounds an operator name.
const maxOperatorLen = 64

// operatorName is a login or an e-mail address: a letter or digit, then
// letters, digits and . _ @ + -. No space, colon or slash, so no URL (a
// signed URL is a secret) and nothing that reads as two names.
var operatorName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]*$`)

// CheckOperator refuses an operator name unfit for the audit trail, which
// records it on every entry: empty, over 64 bytes, or other than a login
// or e-mail address. The command line's --operator and the console's
// launch both check it here.
func CheckOperator(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: an operator name is required (--operator)", ErrBadRequest)
	case len(name) > maxOperatorLen:
		return fmt.Errorf("%w: operator name is %d bytes, at most %d", ErrBadRequest, len(name), maxOperatorLen)
	case !operatorName.MatchString(name):
		return fmt.Errorf("%w: operator name %q: want a login or e-mail address (letters, digits and . _ @ + -, starting with a letter or digit)", ErrBadRequest, name)
	}
	return nil
}
