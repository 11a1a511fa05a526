package replay

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckOperator(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want string // "" accepted
	}{
		{"alice", ""},
		{"grace.hopper@example.com", ""},
		{"svc_ops-2+oncall", ""},
		{"A", ""},
		{"", "required"},
		{" alice", "want a login"},
		{"alice bob", "want a login"},
		{"https://genace.example/out.png?X-Amz-Signature=abc", "want a login"},
		{"alice\n", "want a login"},
		{"-alice", "want a login"},
		{"élodie", "want a login"},
		{strings.Repeat("a", 65), "at most 64"},
	} {
		err := CheckOperator(tc.name)
		if tc.want == "" {
			if err != nil {
				t.Errorf("CheckOperator(%q): %v, want accepted", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckOperator(%q): %v, want ErrBadRequest saying %q", tc.name, err, tc.want)
		}
	}
}
