// Package pluginrpc is the Go binding of the process plugin wire protocol:
// what the two ends of a process plugin share, the go-plugin handshake and
// the conversions between sdk types and the generated messages of
// sdk/process/pluginpb (services) and sdk/abi/abipb (messages).
// host/process (ruled's side) and sdk/process (the plugin's side) both build
// on it, from two Go modules, which is why it is a public package of the
// github.com/ruled-dev/ruled/sdk/process module and not an internal one.
// Plugin authors use sdk/process instead; this package follows the protocol
// version, not the SDK's API promises.
//
// Values that cross the boundary mean exactly what they mean to a Wasm
// guest: configs go through sdk/abi's own codec, and Eval arguments and
// replies follow abi.AppendArg, abi.DecodeArg and abi.DecodeReply (the
// tests hold the two encodings to each other).
package pluginrpc

import (
	"github.com/hashicorp/go-plugin"
)

// ProtocolVersion is the version of the process plugin protocol: the
// services of sdk/abi/plugin.proto with the messages of ABI v1.
const ProtocolVersion = 1

// Magic cookie: go-plugin passes it in the environment, and a plugin
// executable refuses to run without it, so that starting one by hand
// prints an explanation instead of waiting on a handshake.
const (
	MagicCookieKey   = "RULED_PLUGIN_COOKIE"
	MagicCookieValue = "c3b7c1c1f0e04f4e9d6b2a55ruled-process-plugin"
)

// PluginName is the name of the one plugin a process serves, in go-plugin's
// plugin set.
const PluginName = "algorithm"

// Handshake returns the handshake both ends use.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{ProtocolVersion: ProtocolVersion, MagicCookieKey: MagicCookieKey, MagicCookieValue: MagicCookieValue}
}

// MaxMessage bounds one message in either direction (as the Wasm driver
// bounds a guest's messages).
const MaxMessage = 16 << 20
