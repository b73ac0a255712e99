//go:build ci || !cgo || wasm

package ui

// warmGL: builds without GLFW (the headless test driver) have no OpenGL
// driver to load.
func warmGL() error { return nil }
