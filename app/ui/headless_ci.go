//go:build ci

package ui

// headless is true in builds with Fyne's headless test driver (-tags ci).
// That driver runs fyne.Do callbacks on the calling goroutine instead of the
// UI thread, so background work hands its result to widgets synchronously
// there, keeping widget updates on one goroutine.
const headless = true
