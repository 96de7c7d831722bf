package host

import "context"

// ReturnRuleLeases gives every rule lease's unexpired permits back, as a
// reload or Close does, for the tests of package host_test.
func ReturnRuleLeases(ctx context.Context, e *Engine) { e.returnRuleLeases(ctx) }

// LeaseKeyName is the Redis key that holds e's fleet lease key.
func LeaseKeyName(e *Engine) string { return e.clientLeases.keyName() }

// LeaseReturnedKey is the Redis key that marks the lease id returned.
func LeaseReturnedKey(e *Engine, id string) string { return e.clientLeases.returnedKey(id) }
