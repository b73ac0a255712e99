//go:build !darwin && !windows

package ui

import "strings"

// menuLabel is a tray menu label as the panel must receive it: Linux
// panels read the menu over com.canonical.dbusmenu, where "_" marks the
// access key and "__" is an underscore (GTK's rule), so a tool named
// publish_preview would read "publishpreview".
func menuLabel(s string) string { return strings.ReplaceAll(s, "_", "__") }
