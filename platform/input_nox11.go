//go:build linux && (!cgo || ci)

package platform

// NewInputCheck returns the InputCheck of a build without cgo: it cannot
// read the X server's input events, so every answer is unknown (the
// window then needs the operating system's authentication to approve).
func NewInputCheck() InputCheck {
	return unknownInput{reason: "this build cannot read the X server's input events (no cgo)"}
}
