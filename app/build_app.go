//go:build !ci

package app

// headlessBuild is false in the menu-bar app's build (cgo and a real Fyne
// driver).
const headlessBuild = false
