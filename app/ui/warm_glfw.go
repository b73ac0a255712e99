//go:build !ci && cgo && !wasm

package ui

import (
	"errors"

	"github.com/go-gl/gl/v2.1/gl"
	"github.com/go-gl/glfw/v3.3/glfw"
)

// warmGL loads the OpenGL driver and draws once with it, in a hidden GLFW
// window of its own that is never shown and is destroyed at once: on a
// machine without a GPU (Mesa's llvmpipe) loading the driver and starting
// its shader compiler (LLVM) is most of a window's first showing, and is
// paid once per process. Fyne's own windows each have their own OpenGL
// context, whose shaders are still compiled when first drawn. It runs on
// the Fyne goroutine, where GLFW may be called, after Fyne set GLFW up.
func warmGL() error {
	glfw.DefaultWindowHints()
	glfw.WindowHint(glfw.Visible, glfw.False)
	win, err := glfw.CreateWindow(16, 16, "Portcullis", nil, nil)
	glfw.DefaultWindowHints() // Fyne sets the hints it needs per window
	if err != nil {
		return err
	}
	defer win.Destroy()
	prev := glfw.GetCurrentContext()
	win.MakeContextCurrent()
	defer func() {
		if prev != nil {
			prev.MakeContextCurrent()
		} else {
			glfw.DetachCurrentContext()
		}
	}()
	if err := gl.Init(); err != nil {
		return err
	}
	prog, err := warmProgram()
	if err != nil {
		return err
	}
	defer gl.DeleteProgram(prog)
	gl.UseProgram(prog)
	verts := []float32{-1, -1, 1, -1, 0, 1}
	var vbo uint32
	gl.GenBuffers(1, &vbo)
	defer gl.DeleteBuffers(1, &vbo)
	gl.BindBuffer(gl.ARRAY_BUFFER, vbo)
	gl.BufferData(gl.ARRAY_BUFFER, len(verts)*4, gl.Ptr(verts), gl.STATIC_DRAW)
	gl.EnableVertexAttribArray(0)
	gl.VertexAttribPointer(0, 2, gl.FLOAT, false, 0, nil)
	gl.Enable(gl.BLEND)
	gl.BlendFunc(gl.SRC_ALPHA, gl.ONE_MINUS_SRC_ALPHA)
	gl.ClearColor(0, 0, 0, 0)
	gl.Clear(gl.COLOR_BUFFER_BIT)
	gl.DrawArrays(gl.TRIANGLES, 0, 3)
	gl.Finish()
	return nil
}

// warmProgram compiles and links a one-colour shader program.
func warmProgram() (uint32, error) {
	compile := func(kind uint32, src string) uint32 {
		sh := gl.CreateShader(kind)
		csrc, free := gl.Strs(src + "\x00")
		gl.ShaderSource(sh, 1, csrc, nil)
		free()
		gl.CompileShader(sh)
		return sh
	}
	vs := compile(gl.VERTEX_SHADER, "#version 110\nattribute vec2 vert;\nvoid main() { gl_Position = vec4(vert, 0.0, 1.0); }\n")
	fs := compile(gl.FRAGMENT_SHADER, "#version 110\nuniform vec4 color;\nvoid main() { gl_FragColor = color; }\n")
	prog := gl.CreateProgram()
	gl.AttachShader(prog, vs)
	gl.AttachShader(prog, fs)
	gl.BindAttribLocation(prog, 0, gl.Str("vert\x00"))
	gl.LinkProgram(prog)
	gl.DeleteShader(vs)
	gl.DeleteShader(fs)
	var ok int32
	gl.GetProgramiv(prog, gl.LINK_STATUS, &ok)
	if ok == gl.FALSE {
		gl.DeleteProgram(prog)
		return 0, errors.New("the warm-up shader program did not link")
	}
	return prog, nil
}
