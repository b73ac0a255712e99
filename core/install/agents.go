package install

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Agent names an AI agent whose MCP configuration file Portcullis can rewrite. The
// values are the words of the command line (`portcullis install claude-desktop`).
type Agent string

// The agents Portcullis knows (docs/DESIGN.md, "Command line").
const (
	// ClaudeDesktop is Anthropic's desktop app: claude_desktop_config.json, key
	// "mcpServers".
	ClaudeDesktop Agent = "claude-desktop"
	// ClaudeCode is Anthropic's command-line agent: ~/.claude.json (key "mcpServers",
	// and "projects" → PATH → "mcpServers" for servers local to one project) and a
	// project's .mcp.json.
	ClaudeCode Agent = "claude-code"
	// Cursor is the Cursor editor: ~/.cursor/mcp.json and a project's
	// .cursor/mcp.json, key "mcpServers".
	Cursor Agent = "cursor"
	// VSCode is Visual Studio Code: the user profile's mcp.json and a workspace's
	// .vscode/mcp.json, key "servers", in JSON with comments and trailing commas.
	VSCode Agent = "vscode"
	// GeminiCLI is Google's command-line agent: ~/.gemini/settings.json and a
	// project's .gemini/settings.json, key "mcpServers", read with comments
	// allowed (JSONC).
	GeminiCLI Agent = "gemini-cli"
	// Codex is OpenAI's command-line agent: $CODEX_HOME/config.toml (default
	// ~/.codex/config.toml), tables [mcp_servers.NAME]; it has no project file.
	Codex Agent = "codex"
)

// Agents lists every known agent, in the order the command line documents them.
var Agents = []Agent{ClaudeDesktop, ClaudeCode, Cursor, VSCode, GeminiCLI, Codex}

// Name returns the agent's name for people ("Claude Desktop"), or the string
// itself for an unknown agent.
func (a Agent) Name() string {
	switch a {
	case ClaudeDesktop:
		return "Claude Desktop"
	case ClaudeCode:
		return "Claude Code"
	case Cursor:
		return "Cursor"
	case VSCode:
		return "VS Code"
	case GeminiCLI:
		return "Gemini CLI"
	case Codex:
		return "Codex"
	}
	return string(a)
}

// Scope says which of an agent's files to use.
type Scope string

const (
	// ScopeUser is the file that applies to every project of the user (the default).
	ScopeUser Scope = "user"
	// ScopeProject is the file inside the project directory ([Env.Dir]).
	ScopeProject Scope = "project"
)

var (
	// ErrUnknownAgent is returned by [Locate] for an agent not in [Agents].
	ErrUnknownAgent = errors.New("unknown agent")
	// ErrScope is returned by [Locate] for a scope the agent does not have (Claude
	// Desktop has no project file) or a scope that is neither "user" nor "project".
	ErrScope = errors.New("scope not available")
)

// Format is the syntax of an agent's file.
type Format int

const (
	// JSON is plain JSON (RFC 8259): a comment or a trailing comma is an error.
	JSON Format = iota
	// JSONC is JSON with comments and trailing commas, as VS Code reads it.
	JSONC
	// TOML is TOML v1.0.0, Codex's config.toml.
	TOML
)

// Env is what [Locate] needs to know about the machine: the operating system and
// the directories agents derive their paths from. The caller fills it from the
// environment; tests use temporary directories.
type Env struct {
	// GOOS is runtime.GOOS: "darwin" selects macOS locations, anything else the
	// Linux (XDG) ones.
	GOOS string
	// Home is the user's home directory (absolute).
	Home string
	// XDGConfigHome is $XDG_CONFIG_HOME; empty (or relative) means Home/.config.
	XDGConfigHome string
	// ClaudeConfigDir is $CLAUDE_CONFIG_DIR, which moves Claude Code's
	// .claude.json; empty means Home.
	ClaudeConfigDir string
	// CodexHome is $CODEX_HOME, which moves Codex's config.toml; empty (or
	// relative) means Home/.codex.
	CodexHome string
	// Dir is the project directory for [ScopeProject], usually the working directory.
	Dir string
}

// Target is one agent file that install, uninstall and import work on.
type Target struct {
	// Agent owns the file.
	Agent Agent
	// Scope is the scope that selected the file.
	Scope Scope
	// Path is the file's absolute path.
	Path string
	// Format is the file's syntax.
	Format Format
	// Key is the name of the object that maps server names to entries: "mcpServers",
	// or "servers" for VS Code.
	Key string
	// ProjectDir is the project the file belongs to, for project-scoped files: an
	// entry without a cwd runs there, and relative paths are relative to it. It is
	// empty for user-scoped files.
	ProjectDir string
	// Projects is true for Claude Code's ~/.claude.json, whose "projects" object
	// holds one more server map per project directory.
	Projects bool
	// Home is the user's home directory, for VS Code's and Cursor's ${userHome}.
	Home string
}

// Locate returns the file that agent keeps its MCP servers in for scope ("" means
// [ScopeUser]). It does not check that the file exists. Errors wrap
// [ErrUnknownAgent] or [ErrScope].
func Locate(agent Agent, scope Scope, env Env) (Target, error) {
	if scope == "" {
		scope = ScopeUser
	}
	if scope != ScopeUser && scope != ScopeProject {
		return Target{}, fmt.Errorf("scope %q: want %q or %q: %w", scope, ScopeUser, ScopeProject, ErrScope)
	}
	if env.Home == "" || !filepath.IsAbs(env.Home) {
		if scope == ScopeUser {
			return Target{}, fmt.Errorf("locating the %s file: no home directory", agent.Name())
		}
	}
	if scope == ScopeProject && !filepath.IsAbs(env.Dir) {
		return Target{}, fmt.Errorf("locating the %s project file: the project directory %q is not absolute", agent.Name(), env.Dir)
	}
	appData := func() string { // Electron's app.getPath("appData")
		if env.GOOS == "darwin" {
			return filepath.Join(env.Home, "Library", "Application Support")
		}
		if filepath.IsAbs(env.XDGConfigHome) {
			return env.XDGConfigHome
		}
		return filepath.Join(env.Home, ".config")
	}
	t := Target{Agent: agent, Scope: scope, Format: JSON, Key: "mcpServers", Home: env.Home}
	switch agent {
	case ClaudeDesktop:
		if scope == ScopeProject {
			return Target{}, fmt.Errorf("%s has no project configuration: %w", agent.Name(), ErrScope)
		}
		t.Path = filepath.Join(appData(), "Claude", "claude_desktop_config.json")
	case ClaudeCode:
		if scope == ScopeProject {
			t.Path, t.ProjectDir = filepath.Join(env.Dir, ".mcp.json"), env.Dir
			break
		}
		dir := env.Home
		if filepath.IsAbs(env.ClaudeConfigDir) {
			dir = env.ClaudeConfigDir
		}
		t.Path, t.Projects = filepath.Join(dir, ".claude.json"), true
	case Cursor:
		if scope == ScopeProject {
			t.Path, t.ProjectDir = filepath.Join(env.Dir, ".cursor", "mcp.json"), env.Dir
			break
		}
		t.Path = filepath.Join(env.Home, ".cursor", "mcp.json")
	case VSCode:
		t.Format, t.Key = JSONC, "servers"
		if scope == ScopeProject {
			t.Path, t.ProjectDir = filepath.Join(env.Dir, ".vscode", "mcp.json"), env.Dir
			break
		}
		t.Path = filepath.Join(appData(), "Code", "User", "mcp.json")
	case GeminiCLI:
		t.Format = JSONC
		if scope == ScopeProject {
			t.Path, t.ProjectDir = filepath.Join(env.Dir, ".gemini", "settings.json"), env.Dir
			break
		}
		t.Path = filepath.Join(env.Home, ".gemini", "settings.json")
	case Codex:
		if scope == ScopeProject {
			return Target{}, fmt.Errorf("%s has no project configuration, only $CODEX_HOME/config.toml (default ~/.codex/config.toml); run without --scope project: %w", agent.Name(), ErrScope)
		}
		dir := filepath.Join(env.Home, ".codex")
		if filepath.IsAbs(env.CodexHome) {
			dir = env.CodexHome
		}
		t.Format, t.Key, t.Path = TOML, "mcp_servers", filepath.Join(dir, "config.toml")
	default:
		return Target{}, fmt.Errorf("agent %q (known: claude-desktop, claude-code, cursor, vscode, gemini-cli, codex): %w", agent, ErrUnknownAgent)
	}
	return t, nil
}

// projectFile is where agent keeps a project's servers, relative to the
// project directory, or "" when it has no project file.
func projectFile(agent Agent) string {
	switch agent {
	case ClaudeCode:
		return ".mcp.json"
	case Cursor:
		return filepath.Join(".cursor", "mcp.json")
	case VSCode:
		return filepath.Join(".vscode", "mcp.json")
	case GeminiCLI:
		return filepath.Join(".gemini", "settings.json")
	}
	return ""
}

// ResolveExecutable returns the path agents should launch Portcullis by: self
// (the running executable, symbolic links resolved) when it already lies inside a
// macOS application bundle ("….app/Contents/MacOS/…") or when bundles is empty;
// otherwise the first of bundles (candidate executables inside installed
// Portcullis.app bundles, such as
// /Applications/Portcullis.app/Contents/MacOS/portcullis) for which exists returns
// true; otherwise self.
func ResolveExecutable(self string, bundles []string, exists func(string) bool) string {
	if inBundle(self) {
		return self
	}
	for _, b := range bundles {
		if exists(b) {
			return b
		}
	}
	return self
}

// inBundle reports whether p is BUNDLE.app/Contents/MacOS/NAME.
func inBundle(p string) bool {
	macos := filepath.Dir(p)
	contents := filepath.Dir(macos)
	return filepath.Base(macos) == "MacOS" && filepath.Base(contents) == "Contents" &&
		filepath.Ext(filepath.Dir(contents)) == ".app"
}
