package assets

import (
	"bytes"
	"image"
	"image/png"
	"testing"
)

// TestIcons decodes every embedded icon and checks its size and, for the tray
// images, that they are template images: every pixel black with only alpha varying.
func TestIcons(t *testing.T) {
	tests := []struct {
		name     string
		data     []byte
		size     int
		template bool
	}{
		{"Icon", Icon, 512, false},
		{"TrayReady", TrayReady, 22, true},
		{"TrayReady2x", TrayReady2x, 44, true},
		{"TrayApproval", TrayApproval, 22, true},
		{"TrayApproval2x", TrayApproval2x, 44, true},
		{"TrayFailed", TrayFailed, 22, true},
		{"TrayFailed2x", TrayFailed2x, 44, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img, err := png.Decode(bytes.NewReader(tt.data))
			if err != nil {
				t.Fatalf("decoding: %v", err)
			}
			if got := img.Bounds().Size(); got != image.Pt(tt.size, tt.size) {
				t.Fatalf("size = %v, want %dx%d", got, tt.size, tt.size)
			}
			if !tt.template {
				return
			}
			var opaque, transparent int
			b := img.Bounds()
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					r, g, bl, a := img.At(x, y).RGBA()
					if r != 0 || g != 0 || bl != 0 {
						t.Fatalf("pixel (%d,%d) = %d,%d,%d: template images must be black", x, y, r, g, bl)
					}
					switch a {
					case 0xffff:
						opaque++
					case 0:
						transparent++
					}
				}
			}
			if opaque == 0 || transparent == 0 {
				t.Errorf("opaque=%d transparent=%d pixels: want a drawing on a transparent ground", opaque, transparent)
			}
		})
	}
}

// TestTrayStatesDiffer guards against a badge that silently draws nothing.
func TestTrayStatesDiffer(t *testing.T) {
	if bytes.Equal(TrayReady, TrayApproval) || bytes.Equal(TrayReady, TrayFailed) || bytes.Equal(TrayApproval, TrayFailed) {
		t.Error("tray state icons are not all different")
	}
}
