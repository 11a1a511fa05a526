package samlocal

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/genjobs/genjobs/internal/dev/testenv"
)

// MotoSecrets returns Secrets on the Secrets Manager at
// AWS_ENDPOINT_URL_SECRETS_MANAGER (moto, from .ci/moto.sh) in region, or
// skips (fails under GENJOBS_REQUIRE_INTEGRATION=1). Exported for this
// package's external tests.
func MotoSecrets(t testing.TB, region string) *Secrets {
	t.Helper()
	url := testenv.Endpoint(t, "AWS_ENDPOINT_URL_SECRETS_MANAGER")
	return &Secrets{Client: secretsmanager.New(secretsmanager.Options{Region: region, BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")})}
}
