package secret

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

type getter struct {
	val *string
	err error
}

func (g getter) GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	return &secretsmanager.GetSecretValueOutput{SecretString: g.val}, g.err
}

func ptr(s string) *string { return &s }

func TestAPIKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, plain, id string
		g               Getter
		want            string
		wantErr         bool
	}{
		{"plain wins", "k1", "id", getter{val: ptr("other")}, "k1", false},
		{"raw secret", "", "id", getter{val: ptr(" k2\n")}, "k2", false},
		{"json secret", "", "id", getter{val: ptr(`{"api_key":"k3"}`)}, "k3", false},
		{"json without key", "", "id", getter{val: ptr(`{"key":"hunter2"}`)}, "", true},
		{"empty", "", "id", getter{val: ptr("")}, "", true},
		{"read error", "", "id", getter{err: errors.New("AccessDenied")}, "", true},
		{"nothing configured", "", "", nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := APIKey(context.Background(), tt.plain, tt.id, tt.g)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("APIKey = %q, %v", got, err)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error leaks the secret: %v", err)
			}
		})
	}
}
