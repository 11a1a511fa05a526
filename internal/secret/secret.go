// Package secret resolves the Genace API key once per cold start: from
// Secrets Manager when deployed, from the environment for local runs.
package secret

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// Getter reads a secret (secretsmanager.Client satisfies it).
type Getter interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

var _ Getter = (*secretsmanager.Client)(nil)

// APIKey returns the plain key if set, else the secret's value. A secret
// may hold the key itself or a JSON object with an "api_key" field. The
// error never contains the value.
func APIKey(ctx context.Context, plain, secretID string, g Getter) (string, error) {
	if plain != "" {
		return plain, nil
	}
	if secretID == "" {
		return "", errors.New("no Genace API key configured")
	}
	if g == nil {
		return "", errors.New("no Secrets Manager client to read the Genace API key")
	}
	out, err := g.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: &secretID})
	if err != nil {
		return "", fmt.Errorf("read Genace API key secret %s: %w", secretID, err)
	}
	if out.SecretString == nil || strings.TrimSpace(*out.SecretString) == "" {
		return "", fmt.Errorf("secret %s is empty or binary", secretID)
	}
	v := strings.TrimSpace(*out.SecretString)
	if strings.HasPrefix(v, "{") {
		var doc struct {
			APIKey string `json:"api_key"`
		}
		if err := json.Unmarshal([]byte(v), &doc); err != nil || doc.APIKey == "" {
			return "", fmt.Errorf("secret %s is JSON without an \"api_key\" string", secretID)
		}
		return doc.APIKey, nil
	}
	return v, nil
}
