//go:build integration

package dynamo_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/genjobs/genjobs/internal/dev/testenv"
	"github.com/genjobs/genjobs/internal/store/dynamo"
)

// hostLog is an HTTP transport that records every host asked for and
// refuses the instance metadata addresses, so a probe is seen and never
// leaves the machine.
type hostLog struct {
	mu    sync.Mutex
	hosts []string
}

func (h *hostLog) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.hosts = append(h.hosts, r.URL.Host)
	h.mu.Unlock()
	if strings.HasPrefix(r.URL.Host, "169.254.169.254") || strings.Contains(r.URL.Host, "fd00:ec2::254") {
		return nil, errors.New("refused by the test: instance metadata")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A loopback endpoint with no credentials in the environment (as an
// operator's shell running `genjobs reviews --dynamodb-endpoint ...`)
// talks to that endpoint only: no probe of the EC2 instance metadata
// address. Not parallel: it clears the environment.
func TestLoopbackEndpointNeverAsksInstanceMetadata(t *testing.T) {
	testenv.Endpoint(t, "AWS_ENDPOINT_URL_DYNAMODB")
	endpoint, err := url.Parse(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
		"AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CA_BUNDLE"} {
		t.Setenv(v, "")
	}
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)

	log := &hostLog{}
	client, err := dynamo.NewClient(context.Background(), config.WithHTTPClient(&http.Client{Transport: log}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ListTables(context.Background(), &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		t.Errorf("list tables on %s: %v", endpoint.Host, err)
	}
	for _, h := range log.hosts {
		if h != endpoint.Host {
			t.Errorf("the client asked %s; want only the endpoint %s (hosts asked: %v)", h, endpoint.Host, log.hosts)
			break
		}
	}
}
