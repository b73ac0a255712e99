//go:build ci

package app

// headlessBuild is true in a build with Fyne's headless test driver (-tags
// ci, no cgo): every command works but there is no menu-bar window.
const headlessBuild = true
