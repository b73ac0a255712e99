//go:build !ci

package ui

// headless is false with a real driver: fyne.Do runs callbacks on the UI
// thread, so background work may finish on any goroutine.
const headless = false
