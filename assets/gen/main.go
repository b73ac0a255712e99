//go:build ignore

// Command gen draws Portcullis's icons and writes them as PNG files. It uses only the
// standard library (image/draw with coverage masks from 8×8 supersampling), so the
// output is the same on every machine and every run.
//
// Run it from the repository root:
//
//	go run assets/gen/main.go [-out assets]
//
// It writes:
//
//	icon.png                               512×512 colour app icon
//	tray-template.png, tray-template@2x.png   22 and 44 px, black on transparent
//	tray-approval.png, tray-approval@2x.png   the same grille with a dot badge
//	tray-failed.png, tray-failed@2x.png       the same grille with a cross badge
//	panel-*.png, panel-*@2x.png               the same three in colour for panels that do not tint
//	check-off.png                             32 px empty check box for menu entries that are off
//
// The tray images follow the macOS template-image convention: only the alpha
// channel carries the drawing, so the menu bar can tint them for light and dark mode.
package main

import (
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"log"
	"math"
	"os"
	"path/filepath"
)

// samples is the supersampling factor per axis used to compute coverage.
const samples = 8

// shape reports whether a point (in the drawing's own units) is inside.
type shape func(x, y float64) bool

func rect(x0, y0, x1, y1 float64) shape {
	return func(x, y float64) bool { return x >= x0 && x < x1 && y >= y0 && y < y1 }
}

func circle(cx, cy, r float64) shape {
	return func(x, y float64) bool { return (x-cx)*(x-cx)+(y-cy)*(y-cy) < r*r }
}

// roundRect is a rectangle with corners of radius r.
func roundRect(x0, y0, x1, y1, r float64) shape {
	return func(x, y float64) bool {
		if x < x0 || x >= x1 || y < y0 || y >= y1 {
			return false
		}
		cx := math.Min(math.Max(x, x0+r), x1-r)
		cy := math.Min(math.Max(y, y0+r), y1-r)
		return (x-cx)*(x-cx)+(y-cy)*(y-cy) < r*r
	}
}

// polygon is the inside of a simple polygon (even-odd rule).
func polygon(pts ...[2]float64) shape {
	return func(x, y float64) bool {
		in := false
		for i, j := 0, len(pts)-1; i < len(pts); j, i = i, i+1 {
			xi, yi := pts[i][0], pts[i][1]
			xj, yj := pts[j][0], pts[j][1]
			if (yi > y) != (yj > y) && x < (xj-xi)*(y-yi)/(yj-yi)+xi {
				in = !in
			}
		}
		return in
	}
}

// segment is a line from (x0,y0) to (x1,y1) with width w and round caps.
func segment(x0, y0, x1, y1, w float64) shape {
	dx, dy := x1-x0, y1-y0
	l2 := dx*dx + dy*dy
	return func(x, y float64) bool {
		t := math.Max(0, math.Min(1, ((x-x0)*dx+(y-y0)*dy)/l2))
		px, py := x0+t*dx-x, y0+t*dy-y
		return px*px+py*py < w*w/4
	}
}

// arch is a rectangle [x0,x1]×[cy,y1] topped by a half disc centred at (mid, cy).
func arch(x0, x1, cy, y1 float64) shape {
	r := (x1 - x0) / 2
	return union(rect(x0, cy, x1, y1), circle(x0+r, cy, r))
}

func union(s ...shape) shape {
	return func(x, y float64) bool {
		for _, f := range s {
			if f(x, y) {
				return true
			}
		}
		return false
	}
}

func intersect(s ...shape) shape {
	return func(x, y float64) bool {
		for _, f := range s {
			if !f(x, y) {
				return false
			}
		}
		return true
	}
}

func minus(a, b shape) shape {
	return func(x, y float64) bool { return a(x, y) && !b(x, y) }
}

// canvas is an RGBA image on which shapes given in units are drawn at scale
// pixels per unit.
type canvas struct {
	img   *image.RGBA
	scale float64
}

func newCanvas(px int, units float64) *canvas {
	return &canvas{img: image.NewRGBA(image.Rect(0, 0, px, px)), scale: float64(px) / units}
}

// mask returns the coverage of s as an alpha mask.
func (c *canvas) mask(s shape) *image.Alpha {
	b := c.img.Bounds()
	m := image.NewAlpha(b)
	for py := b.Min.Y; py < b.Max.Y; py++ {
		for px := b.Min.X; px < b.Max.X; px++ {
			n := 0
			for sy := 0; sy < samples; sy++ {
				for sx := 0; sx < samples; sx++ {
					x := (float64(px) + (float64(sx)+0.5)/samples) / c.scale
					y := (float64(py) + (float64(sy)+0.5)/samples) / c.scale
					if s(x, y) {
						n++
					}
				}
			}
			m.SetAlpha(px, py, color.Alpha{A: uint8((n*255 + samples*samples/2) / (samples * samples))})
		}
	}
	return m
}

// fill paints s with src (a colour or a gradient image) over what is there.
func (c *canvas) fill(s shape, src image.Image) {
	draw.DrawMask(c.img, c.img.Bounds(), src, image.Point{}, c.mask(s), image.Point{}, draw.Over)
}

// clear removes s from the canvas (sets it fully transparent), for knock-outs.
func (c *canvas) clear(s shape) {
	m := c.mask(s)
	b := c.img.Bounds()
	for py := b.Min.Y; py < b.Max.Y; py++ {
		for px := b.Min.X; px < b.Max.X; px++ {
			keep := 255 - uint32(m.AlphaAt(px, py).A)
			o := c.img.PixOffset(px, py)
			for i := 0; i < 4; i++ {
				c.img.Pix[o+i] = uint8(uint32(c.img.Pix[o+i]) * keep / 255)
			}
		}
	}
}

func uniform(hex uint32) *image.Uniform { return image.NewUniform(rgb(hex)) }

func rgb(hex uint32) color.RGBA {
	return color.RGBA{R: uint8(hex >> 16), G: uint8(hex >> 8), B: uint8(hex), A: 255}
}

// vgradient is a vertical linear gradient between two colours from y0 to y1 (pixels).
type vgradient struct {
	top, bottom color.RGBA
	y0, y1      float64
}

func (g vgradient) ColorModel() color.Model { return color.RGBAModel }
func (g vgradient) Bounds() image.Rectangle {
	return image.Rect(-1e6, -1e6, 1e6, 1e6)
}
func (g vgradient) At(_, y int) color.Color {
	t := math.Max(0, math.Min(1, (float64(y)+0.5-g.y0)/(g.y1-g.y0)))
	mix := func(a, b uint8) uint8 { return uint8(math.Round(float64(a)*(1-t) + float64(b)*t)) }
	return color.RGBA{mix(g.top.R, g.bottom.R), mix(g.top.G, g.bottom.G), mix(g.top.B, g.bottom.B), 255}
}

// appIcon draws the 512×512 colour icon in a 512-unit space: a stone arch on a
// dark-blue rounded square, a warm light behind it, and the iron portcullis half
// lowered across the opening.
func appIcon() *image.RGBA {
	const px = 512
	c := newCanvas(px, 512)
	sc := c.scale
	grad := func(top, bottom uint32, y0, y1 float64) image.Image {
		return vgradient{rgb(top), rgb(bottom), y0 * sc, y1 * sc}
	}

	// Background tile (macOS icon grid: 412-unit square with 92-unit corners, 50 margin).
	tile := roundRect(50, 50, 462, 462, 92)
	c.fill(tile, grad(0x34507A, 0x1B2740, 50, 462))

	// Stone arch: outer and inner outlines share the centre of their round tops.
	const (
		cy     = 236.0 // centre of the arch's round top
		base   = 404.0 // ground line
		outerL = 128.0
		outerR = 384.0
		innerL = 170.0
		innerR = 342.0
	)
	outer := arch(outerL, outerR, cy, base)
	opening := arch(innerL, innerR, cy, base)
	c.fill(minus(outer, opening), grad(0xC9CDD4, 0x8C939F, 108, base))
	// Joints between the arch stones (voussoirs) and courses of the jambs.
	stoneLines := []shape{}
	for _, deg := range []float64{-150, -120, -90, -60, -30} {
		a := deg * math.Pi / 180
		r0, r1 := 86.0, 128.0+2
		stoneLines = append(stoneLines, segment(256+r0*math.Cos(a), cy+r0*math.Sin(a), 256+r1*math.Cos(a), cy+r1*math.Sin(a), 4))
	}
	for _, y := range []float64{280, 324, 368} {
		stoneLines = append(stoneLines, rect(outerL, y-2, innerL, y+2), rect(innerR, y-2, outerR, y+2))
	}
	c.fill(intersect(minus(outer, opening), union(stoneLines...)), uniform(0x6E7582))

	// The opening: dark at the top, warm light from beyond the gate at the bottom.
	c.fill(opening, grad(0x111A2C, 0xF2C46A, 200, base+10))

	// The portcullis: iron bars, clipped to the opening, lowered to bottom.
	const (
		bottom  = 352.0 // where the vertical bars end and the spikes begin
		spike   = 30.0  // spike length
		barW    = 14.0
		crossW  = 13.0
		nBars   = 5
		barGap  = (innerR - innerL) / nBars
		crossY0 = 214.0
		crossDY = 52.0
	)
	var bars []shape
	for i := 0; i < nBars; i++ {
		x := innerL + barGap*(float64(i)+0.5)
		bars = append(bars,
			rect(x-barW/2, 100, x+barW/2, bottom),
			polygon([2]float64{x - barW/2, bottom - 0.5}, [2]float64{x + barW/2, bottom - 0.5}, [2]float64{x, bottom + spike}))
	}
	for i := 0; i < 3; i++ {
		y := crossY0 + crossDY*float64(i)
		bars = append(bars, rect(innerL-10, y-crossW/2, innerR+10, y+crossW/2))
	}
	grille := intersect(union(bars...), opening)
	// A soft shadow to the right and below, then the iron itself.
	shadow := func(x, y float64) bool { return grille(x-3, y-4) }
	c.fill(intersect(minus(shadow, grille), opening), image.NewUniform(color.RGBA{0, 0, 0, 70}))
	c.fill(grille, grad(0x4A5364, 0x262C38, 150, bottom+spike))
	// Rivets where the bars cross.
	var rivets []shape
	for i := 0; i < nBars; i++ {
		x := innerL + barGap*(float64(i)+0.5)
		for j := 0; j < 3; j++ {
			rivets = append(rivets, circle(x, crossY0+crossDY*float64(j), 4.2))
		}
	}
	c.fill(union(rivets...), uniform(0xB8BEC9))

	// Threshold step across the foot of the arch.
	c.fill(roundRect(108, base-2, 404, base+18, 5), grad(0xA9AFB9, 0x79808C, base, base+18))
	return c.img
}

// trayGlyph is the menu-bar portcullis in a 22-unit space: a beam, four bars with
// spikes and two cross bars, aligned to whole units so the 22 px image is crisp.
func trayGlyph() shape {
	parts := []shape{
		roundRect(2, 2, 20, 5, 0.75), // beam
		rect(3, 8, 19, 10),           // cross bars
		rect(3, 13, 19, 15),
	}
	for _, x := range []float64{4, 8, 12, 16} {
		parts = append(parts,
			rect(x, 5, x+2, 17),
			polygon([2]float64{x, 16.9}, [2]float64{x + 2, 16.9}, [2]float64{x + 1, 20.5}))
	}
	return union(parts...)
}

// Badge geometry (22-unit space): bottom-right corner, with a transparent ring
// separating it from the grille.
const (
	badgeX, badgeY = 17.0, 17.0
	badgeR         = 4.5
	badgeGap       = 1.5
)

type trayVariant struct {
	name  string
	badge func(c *canvas) // draws the badge after the knock-out; nil for none
}

func trayVariants() []trayVariant {
	return []trayVariant{
		{name: "tray-template"},
		{name: "tray-approval", badge: func(c *canvas) {
			c.fill(circle(badgeX, badgeY, badgeR), uniform(0x000000))
		}},
		{name: "tray-failed", badge: func(c *canvas) {
			const d = 2.9
			c.fill(union(segment(badgeX-d, badgeY-d, badgeX+d, badgeY+d, 2.5),
				segment(badgeX-d, badgeY+d, badgeX+d, badgeY-d, 2.5)), uniform(0x000000))
		}},
	}
}

func trayIcon(px int, v trayVariant) *image.RGBA {
	c := newCanvas(px, 22)
	c.fill(trayGlyph(), uniform(0x000000))
	if v.badge != nil {
		c.clear(circle(badgeX, badgeY, badgeR+badgeGap))
		v.badge(c)
	}
	return c.img
}

// dilate is s grown by r units in every direction (sampled on a ring),
// for outlines.
func dilate(s shape, r float64) shape {
	return func(x, y float64) bool {
		if s(x, y) {
			return true
		}
		for i := 0; i < 16; i++ {
			a := float64(i) * math.Pi / 8
			if s(x+r*math.Cos(a), y+r*math.Sin(a)) {
				return true
			}
		}
		return false
	}
}

// Colours of the panel icons (Linux trays, which do not tint): a light
// grille with a dark outline reads on dark and on light panels alike; the
// badges are saturated and outlined so that they stand out from both the
// grille and the panel.
const (
	panelLight  = 0xF1F3F4
	panelDark   = 0x202124
	panelAmber  = 0xFFA000
	panelRed    = 0xD93025
	panelWhite  = 0xFFFFFF
	panelStroke = 1.1 // outline width, units
)

// panelIcon is the colour tray icon of a variant for panels that do not
// tint template images.
func panelIcon(px int, v trayVariant) *image.RGBA {
	c := newCanvas(px, 22)
	g := trayGlyph()
	c.fill(dilate(g, panelStroke), uniform(panelDark))
	c.fill(g, uniform(panelLight))
	badge := circle(badgeX, badgeY, badgeR)
	switch v.name {
	case "tray-approval":
		c.clear(circle(badgeX, badgeY, badgeR+badgeGap))
		c.fill(dilate(badge, 0.9), uniform(panelDark))
		c.fill(badge, uniform(panelAmber))
	case "tray-failed":
		const d = 2.2
		c.clear(circle(badgeX, badgeY, badgeR+badgeGap))
		c.fill(dilate(badge, 0.9), uniform(panelDark))
		c.fill(badge, uniform(panelRed))
		c.fill(union(segment(badgeX-d, badgeY-d, badgeX+d, badgeY+d, 1.6),
			segment(badgeX-d, badgeY+d, badgeX+d, badgeY-d, 1.6)), uniform(panelWhite))
	}
	return c.img
}

// checkOff is an empty check box (16 px) for menu entries that are off:
// tray menus draw no box for an unchecked item. Mid grey, so that it reads
// on light and dark menus.
func checkOff() *image.RGBA {
	c := newCanvas(32, 16)
	c.fill(minus(roundRect(2, 2, 14, 14, 2), roundRect(3.6, 3.6, 12.4, 12.4, 1)), uniform(0x8A8F98))
	return c.img
}

func write(dir, name string, img image.Image) error {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	return f.Close()
}

func main() {
	out := flag.String("out", "assets", "directory to write the PNG files to")
	flag.Parse()
	log.SetFlags(0)

	if err := write(*out, "icon.png", appIcon()); err != nil {
		log.Fatal(err)
	}
	for _, v := range trayVariants() {
		for _, s := range []struct {
			suffix string
			px     int
		}{{"", 22}, {"@2x", 44}} {
			if err := write(*out, v.name+s.suffix+".png", trayIcon(s.px, v)); err != nil {
				log.Fatal(err)
			}
			panel := "panel" + v.name[len("tray"):] // panel-template, panel-approval, panel-failed
			if err := write(*out, panel+s.suffix+".png", panelIcon(s.px, v)); err != nil {
				log.Fatal(err)
			}
		}
	}
	if err := write(*out, "check-off.png", checkOff()); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote icons to %s", *out)
}
