// Package client is the Go client of genjobs' intake API, for the
// applications that buy renders through it: create an operation, read its
// status, wait for it to end, change or cancel it before it is submitted.
//
// The API sits behind a Lambda function URL with IAM authorization: every
// request is signed with AWS SigV4 (service "lambda") using the standard
// credential chain, or the credentials given. The wire types here are the
// ones the API's handler answers with, so the two cannot drift.
package client
