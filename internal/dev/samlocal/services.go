package samlocal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// SecretStore keeps a local stack's secrets: Secrets does, in Secrets
// Manager.
type SecretStore interface {
	// Put makes name a secret holding value and returns its ARN.
	Put(ctx context.Context, name, value string) (arn string, err error)
}

// Secrets creates a local stack's secrets in Secrets Manager (moto's), so
// a function reads its Genace key from a real secret, as deployed.
type Secrets struct {
	// Client is a Secrets Manager client on the local endpoint.
	Client *secretsmanager.Client
}

// Put makes name a secret holding value and returns its ARN (Secrets
// Manager's, with its random suffix). A secret of that name left from an
// earlier run is given the value.
func (s Secrets) Put(ctx context.Context, name, value string) (string, error) {
	out, err := s.Client.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value)})
	if err == nil {
		return aws.ToString(out.ARN), nil
	}
	var exists *smtypes.ResourceExistsException
	if !errors.As(err, &exists) {
		return "", fmt.Errorf("secret %s: %w", name, err)
	}
	put, err := s.Client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(name), SecretString: aws.String(value)})
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", name, err)
	}
	return aws.ToString(put.ARN), nil
}

// Unavailable answers, on one loopback port, the AWS APIs a local stack
// must not reach (EventBridge Scheduler, AWS_ENDPOINT_URL_SCHEDULER) with
// a ValidationException, so a delay longer than SQS allows fails loudly
// instead of creating a schedule that never fires.
type Unavailable struct {
	srv *http.Server
	url string
}

// StartUnavailable listens on host (an IP; a port is picked) and serves
// until Close.
func StartUnavailable(host string) (*Unavailable, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("local refusal endpoint: %w", err)
	}
	u := &Unavailable{url: "http://" + ln.Addr().String()}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// URL is the endpoint (http://HOST:PORT).
func (u *Unavailable) URL() string { return u.url }

// Close stops serving.
func (u *Unavailable) Close() error { return u.srv.Close() }

func (u *Unavailable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	what := r.Header.Get("X-Amz-Target")
	if what == "" {
		what = r.Method + " " + r.URL.Path
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Errortype", "ValidationException")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "ValidationException",
		"message": fmt.Sprintf("%s is not available in a local run", what)})
}
