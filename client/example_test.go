package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/genjobs/genjobs/client"
)

// The README's snippet: create, wait, cancel (compiled, not run: it needs
// a deployment).
func Example() {
	ctx := context.Background()
	c, err := client.New("https://ID.lambda-url.eu-west-1.on.aws")
	if err != nil {
		panic(err)
	}
	st, created, err := c.Create(ctx, client.CreateRequest{OperationID: "order-42", UserID: "user-7",
		Model: "flux-pro-2", Input: json.RawMessage(`{"prompt":"a lighthouse"}`), BudgetCredits: 50})
	if errors.Is(err, client.ErrConflict) {
		return // the id names another request
	}
	fmt.Println(st.Phase, created)
	st, err = c.Wait(ctx, "order-42", client.WaitOptions{}) // until terminal, or parked for an operator
	fmt.Println(st.Phase, st.OperatorReview != nil, err)
	_, err = c.Cancel(ctx, "order-42", st.Revision) // before the claim only
	fmt.Println(err)
}
