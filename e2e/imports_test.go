package e2e

import _ "github.com/modelcontextprotocol/go-sdk/mcp"
