// Command echo is the harness's own test function: it answers each
// invocation with the payload it got, the environment variables the
// payload names and its process id, and writes one line to stdout and one
// to stderr, so the harness tests can check what reaches the function and
// what comes back out without any AWS service.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

// request names what the test wants reported back.
type request struct {
	Env   []string `json:"env"`
	Sleep string   `json:"sleep"`
	Fail  string   `json:"fail"`
}

// response is what the function saw.
type response struct {
	Payload  json.RawMessage   `json:"payload"`
	Env      map[string]string `json:"env"`
	PID      int               `json:"pid"`
	Deadline bool              `json:"deadline"`
}

func main() {
	fmt.Fprintln(os.Stderr, "echo: init on stderr")
	lambda.Start(func(ctx context.Context, raw json.RawMessage) (response, error) {
		var req request
		if err := json.Unmarshal(raw, &req); err != nil {
			return response{}, err
		}
		fmt.Println("echo: invoked on stdout")
		if req.Sleep != "" {
			d, err := time.ParseDuration(req.Sleep)
			if err != nil {
				return response{}, err
			}
			time.Sleep(d)
		}
		if req.Fail != "" {
			return response{}, fmt.Errorf("echo: %s", req.Fail)
		}
		_, hasDeadline := ctx.Deadline()
		out := response{Payload: raw, Env: map[string]string{}, PID: os.Getpid(), Deadline: hasDeadline}
		for _, k := range req.Env {
			if v, ok := os.LookupEnv(k); ok {
				out.Env[k] = v
			}
		}
		return out, nil
	})
}
