//go:build darwin || windows

package ui

// menuLabel is a tray menu label as it is: the native menus of macOS take
// the text literally.
func menuLabel(s string) string { return s }
