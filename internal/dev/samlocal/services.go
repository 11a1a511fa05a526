package samlocal

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Services answers, on one loopback port, the AWS APIs a local stack has
// no emulator for, so that a function started with its template's
// environment reads its secrets through the SDK's own client and never
// reaches AWS:
//   - Secrets Manager's GetSecretValue (JSON 1.1 protocol), from the
//     secrets put here (AWS_ENDPOINT_URL_SECRETS_MANAGER);
//   - anything else, EventBridge Scheduler included
//     (AWS_ENDPOINT_URL_SCHEDULER), a ValidationException saying it is
//     not available locally: a delay longer than SQS allows fails loudly
//     in a local run instead of creating a schedule somewhere.
type Services struct {
	mu      sync.Mutex
	secrets map[string]secretValue // by ARN and by name
	srv     *http.Server
	url     string
}

type secretValue struct{ arn, name, value string }

// StartServices listens on host (an IP; a port is picked) and serves
// until Close.
func StartServices(host string) (*Services, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("local AWS services: %w", err)
	}
	s := &Services{secrets: map[string]secretValue{}, url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the endpoint (http://HOST:PORT).
func (s *Services) URL() string { return s.url }

// Close stops serving.
func (s *Services) Close() error { return s.srv.Close() }

// PutSecret stores value as the secret with the ARN arn (and its name,
// the ARN's resource part without Secrets Manager's suffix).
func (s *Services) PutSecret(arn, value string) {
	name := arn
	if i := strings.Index(arn, ":secret:"); i >= 0 {
		name = arn[i+len(":secret:"):]
		if j := strings.LastIndexByte(name, '-'); j > 0 {
			name = name[:j]
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v := secretValue{arn: arn, name: name, value: value}
	s.secrets[arn], s.secrets[name] = v, v
}

func (s *Services) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	if target != "secretsmanager.GetSecretValue" {
		what := target
		if what == "" {
			what = r.Method + " " + r.URL.Path
		}
		fail(w, "ValidationException", fmt.Sprintf("%s is not available in a local run (only Secrets Manager's GetSecretValue is)", what))
		return
	}
	var in struct{ SecretId string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fail(w, "InvalidRequestException", "request body: "+err.Error())
		return
	}
	s.mu.Lock()
	v, ok := s.secrets[in.SecretId]
	s.mu.Unlock()
	if !ok {
		fail(w, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"ARN": v.arn, "Name": v.name, "SecretString": v.value, "VersionId": "00000000-0000-0000-0000-000000000001",
		"VersionStages": []string{"AWSCURRENT"}, "CreatedDate": 0,
	})
}

func fail(w http.ResponseWriter, typ, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Errortype", typ)
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
}
