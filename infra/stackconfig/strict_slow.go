//go:build !go1.27 || !goexperiment.jsonv2

package stackconfig

// hasFastWay: Strict always reads a stack config the long way.
const hasFastWay = false

// decodedAsIs is the fast way of Strict where encoding/json/v2 is built
// in (from Go 1.27, where it is on by default); without it
// Strict always reads the stack config the long way.
func decodedAsIs(raw []byte, out any) bool { return false }
