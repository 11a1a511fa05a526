package artifact

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// MetaSHA256 is the user-metadata name (x-amz-meta-sha256) under which S3
// keeps each object's sha256 in hex, the form Genace reports, so Stat
// answers from one HEAD without reading the object.
const MetaSHA256 = "sha256"

// MaxS3PutSize is the largest object one PutObject may carry (5 GiB). A
// larger output would need a multipart upload; no Genace output comes
// near it, so Put refuses it rather than carry a second upload path.
const MaxS3PutSize int64 = 5 << 30

// S3 stores artifacts in one S3 bucket.
//
// Put is a single streaming PutObject straight to the final key, with no
// temporary key. What keeps a wrong object from ever appearing there:
//
//   - Content-Length is the declared size and the body is a verifier that
//     withholds the last chunk until the stream has proved its size, its
//     end and its sha256. A short, long, failing or corrupt source leaves
//     the request body incomplete, and S3 commits nothing from a PUT whose
//     body is incomplete.
//   - x-amz-checksum-sha256 carries the declared digest, so S3 itself
//     rejects (BadDigest) a complete body with other content.
//   - If-None-Match: * makes the PUT create-only: an existing object is
//     never replaced (412), and Put then reuses it if its size and sha256
//     match, or reports ErrConflict.
//
// This costs one request per output, where a temporary key would cost a
// PUT, a server-side copy (itself limited to 5 GiB) and a DELETE, and
// could leave orphaned temporaries behind. The body is unseekable, so the
// payload is sent UNSIGNED-PAYLOAD (integrity comes from the checksum
// header) and the SDK does not retry the PUT; the caller retries.
//
// The sha256 is kept as user metadata (MetaSHA256). When S3 also returns
// its own full-object SHA-256 checksum, Stat cross-checks the two.
type S3 struct {
	client *s3.Client
	bucket string
}

// NewS3 returns a store over one bucket.
func NewS3(client *s3.Client, bucket string) *S3 {
	return &S3{client: client, bucket: bucket}
}

// Bucket names the store's bucket.
func (s *S3) Bucket() string { return s.bucket }

// Stat HEADs the object: its size and the sha256 it was stored with, or
// false when the key holds nothing.
func (s *S3) Stat(ctx context.Context, key string) (Object, bool, error) {
	if err := CheckKey(key); err != nil {
		return Object{}, false, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled,
	})
	if status(err) == http.StatusNotFound {
		return Object{}, false, nil
	}
	if err != nil {
		return Object{}, false, fmt.Errorf("artifact: s3 stat %s: %w", key, err)
	}
	o := Object{Key: key, Size: aws.ToInt64(out.ContentLength), SHA256: out.Metadata[MetaSHA256]}
	if sum, ok := fullObjectSHA256(out.ChecksumSHA256); ok {
		switch {
		case o.SHA256 == "":
			o.SHA256 = sum
		case o.SHA256 != sum:
			return Object{}, false, fmt.Errorf("artifact: s3 stat %s: metadata sha256 %s disagrees with S3's checksum %s", key, o.SHA256, sum)
		}
	}
	return o, true, nil
}

// fullObjectSHA256 decodes S3's base64 checksum into hex; a composite
// (multipart) checksum ("...-N") is not the content's digest and is
// ignored.
func fullObjectSHA256(b64 *string) (string, bool) {
	if b64 == nil {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(*b64)
	if err != nil || len(raw) != 32 {
		return "", false
	}
	return hex.EncodeToString(raw), true
}

// Put streams r to key as one create-only PutObject, verified as it
// streams (see S3). When the key already holds the same content it returns
// that object; different content is ErrConflict.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, sum, contentType string) (Object, error) {
	if err := CheckPut(key, size, sum); err != nil {
		return Object{}, err
	}
	if size > MaxS3PutSize {
		return Object{}, fmt.Errorf("%w: %d bytes is over the single-PUT limit of %d", ErrInvalid, size, MaxS3PutSize)
	}
	v := NewVerifier(r, size, sum)
	if size == 0 {
		// An empty body has no last byte to withhold: prove it before
		// sending anything.
		if err := v.finish(nil); err != io.EOF {
			return Object{}, fmt.Errorf("artifact: s3 put %s: %w", key, err)
		}
	}
	raw, _ := hex.DecodeString(sum)
	in := &s3.PutObjectInput{
		Bucket:         aws.String(s.bucket),
		Key:            aws.String(key),
		Body:           onlyReader{v}, // never seekable, so the SDK never buffers or re-reads it
		ContentLength:  aws.Int64(size),
		ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(raw)),
		Metadata:       map[string]string{MetaSHA256: sum},
		IfNoneMatch:    aws.String("*"),
	}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	_, err := s.client.PutObject(ctx, in,
		s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware),
		func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	switch {
	case err == nil && v.ok:
		return Object{Key: key, Size: size, SHA256: sum}, nil
	case err == nil:
		// S3 said it stored an object the verifier never finished: that
		// cannot be trusted. Remove it (create-only, so it is ours).
		derr := s.delete(ctx, key)
		return Object{}, errors.Join(fmt.Errorf("artifact: s3 put %s: %w: stored before the stream was verified; removed", key, ErrMismatch), derr)
	case v.err != nil:
		// The source was wrong or failed; the body never completed.
		return Object{}, fmt.Errorf("artifact: s3 put %s: %w", key, v.err)
	case status(err) == http.StatusPreconditionFailed:
		o, ok, serr := s.Stat(ctx, key)
		if serr != nil {
			return Object{}, serr
		}
		if !ok {
			return Object{}, fmt.Errorf("artifact: s3 put %s: create-only PUT refused, yet no object is there: %w", key, err)
		}
		if Same(o, size, sum) {
			return o, nil
		}
		return Object{}, fmt.Errorf("%w: %s holds %d bytes with sha256 %q, not %d bytes with %s", ErrConflict, key, o.Size, o.SHA256, size, sum)
	}
	return Object{}, fmt.Errorf("artifact: s3 put %s: %w", key, err)
}

func (s *S3) delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return fmt.Errorf("artifact: s3 delete %s: %w", key, err)
	}
	return nil
}

// status is the HTTP status of an S3 error answer, 0 for anything else.
func status(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// onlyReader hides every method but Read, so the SDK sees an unseekable
// stream of unknown type and sends it as it comes.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }
