package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// openaiRequest is the part of a Responses API request the server reads.
type openaiRequest struct {
	Model  string            `json:"model"`
	Stream bool              `json:"stream"`
	Input  []json.RawMessage `json:"input"`
	Tools  []openaiTool      `json:"tools"`
}

// openaiTool is one entry of a request's tools: a function, or a namespace
// grouping functions (Codex offers an MCP server's tools as the namespace
// mcp__LABEL).
type openaiTool struct {
	Type  string       `json:"type"`
	Name  string       `json:"name"`
	Tools []openaiTool `json:"tools"`
}

// openaiItem is the part of an input item the server reads.
type openaiItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Output    json.RawMessage `json:"output"` // of a function_call_output: a string or content items
}

// NamespaceSep joins a namespace and a function's name into the name a
// Step gives for a namespaced tool (Codex's mcp__LABEL namespace and
// inventory_lookup make "mcp__LABEL__inventory_lookup", the name Codex
// itself gives the tool).
const NamespaceSep = "__"

func (s *Server) openai(w http.ResponseWriter, r *http.Request, body []byte) {
	var in openaiRequest
	req := Request{API: OpenAI, Seq: s.newSeq(), Path: r.URL.RequestURI(), Body: json.RawMessage(body), Step: -1}
	if err := json.Unmarshal(body, &in); err != nil {
		s.fail(fmt.Errorf("fakemodel: Responses request: %w", err))
		s.record(req)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": err.Error()}})
		return
	}
	namespaces := map[string]string{} // full tool name → its namespace
	for _, t := range in.Tools {
		switch {
		case t.Type == "namespace":
			for _, f := range t.Tools {
				full := t.Name + NamespaceSep + f.Name
				namespaces[full] = t.Name
				req.Tools = append(req.Tools, full)
			}
		case t.Name != "":
			req.Tools = append(req.Tools, t.Name)
		default:
			req.Tools = append(req.Tools, t.Type) // a built-in tool (web_search)
		}
	}
	// The tool results are the function_call_output items after the
	// model's last output (its function calls, an assistant message); the
	// agent may add messages of its own after them.
	for i := len(in.Input) - 1; i >= 0; i-- {
		var it openaiItem
		if json.Unmarshal(in.Input[i], &it) != nil {
			continue
		}
		if it.Type == "function_call" || it.Type == "message" && it.Role == "assistant" {
			break
		}
		if it.Type == "function_call_output" {
			s.mu.Lock()
			name := s.callName[it.CallID]
			s.mu.Unlock()
			req.Result = append([]ToolResult{{CallID: it.CallID, Name: name, Text: openaiOutput(it.Output)}}, req.Result...)
		}
	}
	var st Step
	if len(req.Tools) > 0 {
		st = s.answer(&req)
	} else {
		st = Step{Text: "ok"}
	}
	s.record(req)

	id := fmt.Sprintf("resp_%d", req.Seq)
	var item map[string]any
	if st.Tool != "" {
		callID := fmt.Sprintf("call_%d", req.Seq)
		s.mu.Lock()
		s.callName[callID] = st.Tool
		s.mu.Unlock()
		args := st.Args
		if args == nil {
			args = map[string]any{}
		}
		a, _ := json.Marshal(args)
		item = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", req.Seq), "call_id": callID,
			"name": st.Tool, "arguments": string(a), "status": "completed"}
		if ns, ok := namespaces[st.Tool]; ok {
			item["namespace"], item["name"] = ns, strings.TrimPrefix(st.Tool, ns+NamespaceSep)
		}
	} else {
		item = map[string]any{"type": "message", "id": fmt.Sprintf("msg_%d", req.Seq), "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": st.Text, "annotations": []any{}}}}
	}
	usage := map[string]any{"input_tokens": 100, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": 10, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 110}
	response := func(status string, output []any, usage any) map[string]any {
		return map[string]any{"id": id, "object": "response", "status": status, "model": in.Model, "output": output, "usage": usage}
	}
	if !in.Stream {
		writeJSON(w, response("completed", []any{item}, usage))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	sse(w, "response.created", map[string]any{"type": "response.created", "response": response("in_progress", []any{}, nil)})
	sse(w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	if st.Tool == "" {
		sse(w, "response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": item["id"],
			"output_index": 0, "content_index": 0, "delta": st.Text})
	}
	sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	sse(w, "response.completed", map[string]any{"type": "response.completed", "response": response("completed", []any{item}, usage)})
}

// openaiOutput is the text of a function_call_output's output: a string, or
// content items whose text parts are joined by newlines. The Responses API
// has no error flag on it (Codex writes a failed call as text, "tool call
// error: …", or as the content of the result that had isError), so the
// ToolResults of this API never have IsError: tests read the text.
func openaiOutput(out json.RawMessage) string {
	var text string
	if json.Unmarshal(out, &text) == nil {
		return text
	}
	var items []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(out, &items) != nil {
		return string(out)
	}
	parts := make([]string, 0, len(items))
	for _, it := range items {
		if it.Type == "input_text" || it.Type == "output_text" {
			parts = append(parts, it.Text)
		} else {
			parts = append(parts, "["+it.Type+"]")
		}
	}
	return strings.Join(parts, "\n")
}
