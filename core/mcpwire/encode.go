package mcpwire

import (
	"encoding/json"
	"strconv"
)

// envelope is the shape of every message the gateway writes itself. Field
// order follows the JSON-RPC 2.0 examples: jsonrpc, id, method/result/error.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  any             `json:"params,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   *WireError      `json:"error,omitempty"`
}

// WireError is the JSON-RPC 2.0 error object (JSON-RPC 2.0 spec, section 5.1).
type WireError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// NumberID renders a gateway-minted id as a JSON number.
func NumberID(n int64) json.RawMessage { return strconv.AppendInt(nil, n, 10) }

// NewRequest encodes a request line (without newline). params may be nil,
// a value for encoding/json, or a json.RawMessage.
func NewRequest(id json.RawMessage, method string, params any) ([]byte, error) {
	return json.Marshal(envelope{JSONRPC: "2.0", ID: id, Method: method, Params: params})
}

// NewNotification encodes a notification line (without newline).
func NewNotification(method string, params any) ([]byte, error) {
	return json.Marshal(envelope{JSONRPC: "2.0", Method: method, Params: params})
}

// NewResult encodes a successful response to id.
func NewResult(id json.RawMessage, result any) ([]byte, error) {
	if result == nil {
		result = json.RawMessage(`{}`)
	}
	return json.Marshal(envelope{JSONRPC: "2.0", ID: id, Result: result})
}

// NewError encodes an error response to id; a nil id is written as null, as
// JSON-RPC 2.0 (section 5) asks when the request's id could not be read.
func NewError(id json.RawMessage, code int, message string, data any) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, err := json.Marshal(envelope{JSONRPC: "2.0", ID: id, Error: &WireError{Code: code, Message: message, Data: data}})
	if err != nil {
		// data could not be encoded: keep the code and message, never fail.
		b, _ = json.Marshal(envelope{JSONRPC: "2.0", ID: id, Error: &WireError{Code: code, Message: message}})
	}
	return b
}
