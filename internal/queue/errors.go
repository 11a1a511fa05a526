package queue

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
)

// Error codes are compared after normalise, without the query-protocol
// prefix (SQS's JSON protocol reports QueueDoesNotExist as
// AWS.SimpleQueueService.NonExistentQueue through x-amzn-query-error).
// The codes are matched as strings so one list serves SQS and EventBridge
// Scheduler alike.
var (
	// permanentCodes fail the same way however often they are retried: the
	// request or the configuration is wrong.
	permanentCodes = codeSet(
		// arguments
		"InvalidParameterValue", "InvalidParameterCombination", "MissingParameter",
		"InvalidAttributeName", "InvalidAttributeValue", "InvalidMessageContents",
		"MessageTooBig", "InvalidAddress", "InvalidIdFormat", "ValidationError",
		"ValidationException", "SerializationException", "UnsupportedOperation",
		// the queue or message is not there (any more)
		"QueueDoesNotExist", "NonExistentQueue", "QueueDeletedRecently",
		"ReceiptHandleIsInvalid", "MessageNotInflight", "ResourceNotFoundException",
		// permissions and keys
		"AccessDenied", "AccessDeniedException", "InvalidSecurity", "InvalidClientTokenId",
		"UnrecognizedClientException", "MissingAuthenticationToken", "SignatureDoesNotMatch",
		"KmsAccessDenied", "KmsDisabled", "KmsNotFound", "KmsInvalidState",
		"KmsInvalidKeyUsage", "KmsOptInRequired",
		// quotas that no retry within minutes will lift
		"ServiceQuotaExceededException",
	)
	// transientCodes mean the service could not take the request now.
	transientCodes = codeSet(
		"RequestThrottled", "Throttling", "ThrottlingException", "ThrottledException",
		"RequestThrottledException", "TooManyRequestsException", "KmsThrottled",
		"OverLimit", "ServiceUnavailable", "ServiceUnavailableException",
		"InternalError", "InternalFailure", "InternalServerError", "InternalServerException",
		"RequestTimeout", "RequestTimeoutException",
		// Lambda: the event source mapping is still applying the previous
		// update (or being created); it settles within seconds.
		"ResourceInUseException",
	)
)

func codeSet(codes ...string) map[string]struct{} {
	m := make(map[string]struct{}, len(codes))
	for _, c := range codes {
		m[c] = struct{}{}
	}
	return m
}

func normalise(code string) string {
	code = strings.TrimPrefix(code, "AWS.SimpleQueueService.")
	return strings.TrimPrefix(code, "AWS.SimpleNotificationService.")
}

// sdkRetryables is the SDK's own judgement (connection resets, refused
// connections, 5xx, its throttle codes), consulted for what the lists
// above do not name.
var sdkRetryables = retry.IsErrorRetryables(retry.DefaultRetryables)

// Retryable reports whether trying the same call again later can succeed:
// throttling, server errors (5xx), timeouts and broken connections are
// retryable; invalid arguments, a missing queue, denied access and a
// cancelled context are not, and neither is an error it does not
// recognise. The SDK has already retried each call a few times, so a
// retryable error here is for the message-level retry (let SQS redeliver),
// and a non-retryable one should fail loudly instead of looping. It works
// on any error wrapping an AWS SDK error, EventBridge Scheduler's and
// Lambda's (Mapping) included.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	// The caller gave up; a retry would be a new decision, not this one.
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code := normalise(apiErr.ErrorCode())
		if _, ok := permanentCodes[code]; ok {
			return false
		}
		if _, ok := transientCodes[code]; ok {
			return true
		}
	}
	var withStatus interface{ HTTPStatusCode() int }
	if errors.As(err, &withStatus) {
		switch status := withStatus.HTTPStatusCode(); {
		case status >= 500, status == 429:
			return true
		case status >= 400:
			return false
		}
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}
	return sdkRetryables.IsErrorRetryable(err) == aws.TrueTernary
}
