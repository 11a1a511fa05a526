// Package artifacttest serves an in-memory S3 (gofakes3) over HTTP for
// tests and returns a real aws-sdk-go-v2 S3 client for it, configured as
// production code would be apart from the endpoint: path-style
// addressing, static credentials, us-east-1.
package artifacttest

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Bucket is the bucket FakeS3 creates.
const Bucket = "genjobs-artifacts-test"

// FakeS3 starts gofakes3 with Bucket created and returns a client for it.
// The server stops when the test ends.
func FakeS3(t testing.TB) *s3.Client {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(Bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return Client(srv.URL)
}

// Client returns an S3 client for an S3-compatible endpoint with static
// test credentials.
func Client(endpoint string) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "artifacttest"}, nil
		}),
	})
}
