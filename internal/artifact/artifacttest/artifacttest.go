// Package artifacttest gives tests a real aws-sdk-go-v2 S3 client,
// configured as production code would be apart from the endpoint
// (path-style addressing, static credentials, us-east-1), on a fresh
// bucket: in moto's S3 (S3), or in an in-memory gofakes3 (FakeS3) for
// handler tests that need no local service.
package artifacttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/genjobs/genjobs/internal/dev/testenv"
)

// S3 creates a bucket of its own for the test in the S3 at
// AWS_ENDPOINT_URL_S3 (moto, from .ci/moto.sh), which checks what S3
// checks of a write (If-None-Match, the SHA-256 checksum), and returns a
// client and the bucket's name; without the endpoint the test skips
// (fails under GENJOBS_REQUIRE_INTEGRATION=1). The bucket and its objects
// are removed when the test ends.
func S3(t testing.TB) (*s3.Client, string) {
	t.Helper()
	c := Client(testenv.Endpoint(t, "AWS_ENDPOINT_URL_S3"))
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	bucket := "genjobs-artifacts-test-" + hex.EncodeToString(b)
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		if err == nil {
			for _, o := range out.Contents {
				_, _ = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			}
		}
		_, _ = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)})
	})
	return c, bucket
}

// Bucket is the bucket FakeS3 creates.
const Bucket = "genjobs-artifacts-test"

// FakeS3 starts gofakes3 with Bucket created and returns a client for it.
// The server stops when the test ends. It is for tests of the deliver
// handler's decisions; the S3 adapter itself is tested on moto (S3).
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
