package host

import "context"

// ReturnRuleLeases gives every rule lease's unexpired permits back, as a
// reload or Close does, for the tests of package host_test.
func ReturnRuleLeases(ctx context.Context, e *Engine) { e.returnRuleLeases(ctx) }
