package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// anthropicRequest is the part of a Messages API request the server reads.
type anthropicRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"` // a string or an array of blocks
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// anthropicBlock is one content block of a message.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // of a tool_result: a string or blocks
	IsError   bool            `json:"is_error"`
}

func (s *Server) anthropic(w http.ResponseWriter, r *http.Request, body []byte) {
	var in anthropicRequest
	req := Request{API: Anthropic, Seq: s.newSeq(), Path: r.URL.RequestURI(), Body: json.RawMessage(body), Step: -1}
	if err := json.Unmarshal(body, &in); err != nil {
		s.fail(fmt.Errorf("fakemodel: Messages request: %w", err))
		s.record(req)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": err.Error()}})
		return
	}
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, t.Name)
	}
	// The tool results are in the messages after the model's last turn
	// (Claude Code may add a message of its own after them, even one with
	// role "system").
	for i := len(in.Messages) - 1; i >= 0 && in.Messages[i].Role != "assistant"; i-- {
		req.Result = append(s.anthropicResults(in.Messages[i].Content), req.Result...)
	}
	var st Step
	if len(in.Tools) > 0 {
		st = s.answer(&req)
	} else {
		st = Step{Text: "ok"}
	}
	s.record(req)

	id := fmt.Sprintf("msg_%d", req.Seq)
	var block map[string]any
	var delta map[string]any
	stop := "end_turn"
	if st.Tool != "" {
		callID := fmt.Sprintf("toolu_%d", req.Seq)
		s.mu.Lock()
		s.callName[callID] = st.Tool
		s.mu.Unlock()
		args := st.Args
		if args == nil {
			args = map[string]any{}
		}
		a, _ := json.Marshal(args)
		block = map[string]any{"type": "tool_use", "id": callID, "name": st.Tool, "input": map[string]any{}}
		delta = map[string]any{"type": "input_json_delta", "partial_json": string(a)}
		stop = "tool_use"
	} else {
		block = map[string]any{"type": "text", "text": ""}
		delta = map[string]any{"type": "text_delta", "text": st.Text}
	}
	usage := map[string]any{"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !in.Stream {
		full := map[string]any{"type": "text", "text": st.Text}
		if st.Tool != "" {
			full = map[string]any{"type": "tool_use", "id": block["id"], "name": st.Tool, "input": st.Args}
		}
		writeJSON(w, map[string]any{"id": id, "type": "message", "role": "assistant", "model": in.Model,
			"content": []any{full}, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": in.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": usage}})
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": block})
	sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": delta})
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 10}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// anthropicResults returns the tool_result blocks of a user message.
func (s *Server) anthropicResults(content json.RawMessage) []ToolResult {
	var blocks []anthropicBlock
	if json.Unmarshal(content, &blocks) != nil {
		return nil // a plain string: no tool results
	}
	var out []ToolResult
	for _, b := range blocks {
		if b.Type != "tool_result" {
			continue
		}
		s.mu.Lock()
		name := s.callName[b.ToolUseID]
		s.mu.Unlock()
		out = append(out, ToolResult{CallID: b.ToolUseID, Name: name, Text: blocksText(b.Content), IsError: b.IsError})
	}
	return out
}

// blocksText is the text of a tool_result's content: the string itself, or
// its text blocks joined by newlines (other blocks by their type).
func blocksText(content json.RawMessage) string {
	var str string
	if json.Unmarshal(content, &str) == nil {
		return str
	}
	var blocks []anthropicBlock
	if json.Unmarshal(content, &blocks) != nil {
		return string(content)
	}
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		} else {
			parts = append(parts, "["+b.Type+"]")
		}
	}
	return strings.Join(parts, "\n")
}
