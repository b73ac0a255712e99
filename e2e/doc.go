// Package e2e holds the end-to-end tests of Portcullis: a real daemon, the
// real `portcullis connect` shim, real MCP clients (the go-sdk, the MCP
// Inspector CLI) and real MCP servers (Go servers built from
// internal/testservers, the npm reference servers).
package e2e
