// Package artifacttest gives tests a real aws-sdk-go-v2 S3 client,
// configured as production code would be apart from the endpoint
// (path-style addressing, static credentials, us-east-1), on a fresh
// bucket of its own in moto's S3.
package artifacttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

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
