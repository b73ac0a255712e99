// Package supervisortest provides fake server processes and a process-group
// probe for tests of code that launches processes. The fake is the running
// test binary itself, started again with an environment variable that selects
// a behavior (the pattern of go-sdk mcp/cmd_test.go): call [RunIfChild] first
// in TestMain, then launch [Command]'s result.
package supervisortest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childEnv selects the behavior of a re-executed test binary.
const childEnv = "PORTCULLIS_SUPERVISORTEST_CHILD"

// Behavior is what a fake child does.
type Behavior string

const (
	// Echo copies stdin to stdout line by line and exits 0 at stdin EOF,
	// like a well-behaved stdio MCP server.
	Echo Behavior = "echo"
	// Stubborn ignores SIGTERM, never reads stdin, writes "ready\n" to
	// stdout once SIGTERM is ignored, and sleeps until killed.
	Stubborn Behavior = "stubborn"
	// StubbornParent starts a Stubborn grandchild (in the same process group),
	// waits until it is ready, writes "ready <grandchild pid>\n" to stdout,
	// then behaves like Echo.
	StubbornParent Behavior = "stubborn-parent"
	// EscapingParent starts a Stubborn grandchild that leaves the process
	// group, with setsid when args[0] is "setsid", with setpgid when it is
	// "setpgid"; waits until it is ready, writes "ready <grandchild pid>\n"
	// to stdout, then behaves like Echo.
	EscapingParent Behavior = "escaping-parent"
	// Crash writes a Python-style traceback to stderr, ending in
	// "ValueError: boom", and exits 1.
	Crash Behavior = "crash"
	// Flood writes args[0] lines "line N" (N from 1) to stderr, then args[1]
	// bytes of 'x' without a newline, then exits 0.
	Flood Behavior = "flood"
	// PrintEnv writes "NAME=value" for each name in args to stdout and exits 0.
	PrintEnv Behavior = "env"
)

// Command returns what starts the running test binary as a fake child with
// behavior b: the binary's absolute path, the arguments (a -test.run that
// matches nothing, then "--" and args), and the extra "K=V" environment entry
// that RunIfChild recognizes.
func Command(b Behavior, args ...string) (command string, argv []string, env []string) {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exe, append([]string{"-test.run=^$", "--"}, args...), []string{childEnv + "=" + string(b)}
}

// RunIfChild runs the selected behavior and exits when this process was
// started through Command; otherwise it returns at once.
func RunIfChild() {
	b := os.Getenv(childEnv)
	if b == "" {
		return
	}
	var args []string
	for i, a := range os.Args {
		if a == "--" {
			args = os.Args[i+1:]
			break
		}
	}
	os.Exit(run(Behavior(b), args))
}

func run(b Behavior, args []string) int {
	switch b {
	case Echo:
		return echo()
	case Stubborn:
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		for {
			time.Sleep(time.Hour)
		}
	case StubbornParent:
		return stubbornParent(nil)
	case EscapingParent:
		switch {
		case len(args) == 1 && args[0] == "setsid":
			return stubbornParent(&syscall.SysProcAttr{Setsid: true})
		case len(args) == 1 && args[0] == "setpgid":
			return stubbornParent(&syscall.SysProcAttr{Setpgid: true})
		}
		fmt.Fprintln(os.Stderr, "escaping-parent: want setsid or setpgid")
		return 2
	case Crash:
		fmt.Fprint(os.Stderr, "Traceback (most recent call last):\n"+
			"  File \"/srv/server.py\", line 3, in <module>\n"+
			"    main()\n"+
			"ValueError: boom\n")
		return 1
	case Flood:
		if len(args) != 2 {
			fmt.Fprintln(os.Stderr, "flood: want LINES TAILBYTES")
			return 2
		}
		n, _ := strconv.Atoi(args[0])
		tail, _ := strconv.Atoi(args[1])
		w := bufio.NewWriter(os.Stderr)
		for i := 1; i <= n; i++ {
			fmt.Fprintf(w, "line %d\n", i)
		}
		w.WriteString(strings.Repeat("x", tail))
		w.Flush()
		return 0
	case PrintEnv:
		for _, k := range args {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "supervisortest: unknown behavior %q\n", b)
	return 2
}

func echo() int {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Println(sc.Text())
	}
	return 0
}

// stubbornParent starts a Stubborn grandchild with attr (nil: in this
// process's group), then behaves like Echo.
func stubbornParent(attr *syscall.SysProcAttr) int {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(Stubborn))
	cmd.SysProcAttr = attr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		fmt.Fprintf(os.Stderr, "grandchild not ready: %q %v\n", line, err)
		return 2
	}
	fmt.Printf("ready %d\n", cmd.Process.Pid)
	return echo()
}
