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

// TestPanelIcons: the colour tray icons read on dark and light panels (each
// has light pixels and dark ones, the outline), and the badges carry their
// own colour: amber for an approval waiting, red for a failure, none on the
// plain icon.
func TestPanelIcons(t *testing.T) {
	tests := []struct {
		name  string
		data  []byte
		size  int
		badge func(r, g, b uint32) bool // a badge pixel, by colour
		want  bool
	}{
		{"PanelReady", PanelReady, 22, amber, false},
		{"PanelReady2x", PanelReady2x, 44, red, false},
		{"PanelApproval", PanelApproval, 22, amber, true},
		{"PanelApproval2x", PanelApproval2x, 44, amber, true},
		{"PanelFailed", PanelFailed, 22, red, true},
		{"PanelFailed2x", PanelFailed2x, 44, red, true},
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
			var light, dark, badge int
			b := img.Bounds()
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					r, g, bl, a := img.At(x, y).RGBA()
					if a != 0xffff {
						continue
					}
					r, g, bl = r>>8, g>>8, bl>>8
					switch luma := (299*r + 587*g + 114*bl) / 1000; {
					case luma > 200:
						light++
					case luma < 60:
						dark++
					}
					if tt.badge(r, g, bl) {
						badge++
					}
				}
			}
			if light == 0 || dark == 0 {
				t.Errorf("light=%d dark=%d opaque pixels: want both, to read on any panel", light, dark)
			}
			if (badge > 0) != tt.want {
				t.Errorf("%d badge-coloured pixels, want badge %v", badge, tt.want)
			}
		})
	}
}

func amber(r, g, b uint32) bool { return r > 200 && g > 120 && g < 200 && b < 60 }
func red(r, g, b uint32) bool   { return r > 180 && g < 80 && b < 80 }
