package sdk

// LocalLimiter decides in-process, from an explicit clock in microseconds,
// what the plugin's script would decide in Redis. ruled uses it for rules
// with on_error: local while Redis is unavailable. ruled serialises calls to
// one LocalLimiter.
type LocalLimiter interface {
	Decide(nowUS int64, r Request) Decision
}

// LocalAlgorithm is an optional interface for plugins that can decide
// in-process while Redis is unavailable (on_error: local). share is this
// ruled instance's fraction of the global quota, 1 divided by the number of
// live instances, in (0, 1]; the limiter should admit about share of what
// the rule admits, and at least one unit per period so that no instance
// locks everyone out (unless the rule blocks: a limit of 0 stays 0). A plugin without it falls back to on_error: allow.
type LocalAlgorithm interface {
	NewLocal(c Config, share float64) (LocalLimiter, error)
}

// ScaleLimit returns limit scaled by share, rounded down but at least 1; a
// limit of 0 or less (a block) stays as it is, whatever the share.
func ScaleLimit(limit int64, share float64) int64 {
	if limit <= 0 || share >= 1 {
		return limit
	}
	return max(1, int64(float64(limit)*share))
}
