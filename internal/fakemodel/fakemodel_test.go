package fakemodel

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// sseData returns the data lines of a server-sent event stream, decoded.
func sseData(t *testing.T, stream string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(stream))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("event data %q: %v", d, err)
			}
			out = append(out, m)
		}
	}
	return out
}

func start(t *testing.T, script Script) *Server {
	t.Helper()
	s, err := Start(script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestAnthropicScript(t *testing.T) {
	s := start(t, Script{
		{Tool: "mcp__inv__lookup", Args: map[string]any{"sku": "W-1"}},
		{Text: "all done"},
	})
	url := s.URL() + "/v1/messages?beta=true"

	// A side request (no tools) consumes no step.
	_, side := post(t, url, `{"model":"m","stream":true,"messages":[{"role":"user","content":"title?"}]}`)
	if ev := sseData(t, side); len(ev) != 6 || ev[2]["delta"].(map[string]any)["text"] != "ok" {
		t.Fatalf("side request answered %q", side)
	}

	resp, first := post(t, url, `{"model":"m","stream":true,"tools":[{"name":"mcp__inv__lookup"}],"messages":[{"role":"user","content":"go"}]}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	ev := sseData(t, first)
	types := []string{}
	for _, e := range ev {
		types = append(types, e["type"].(string))
	}
	if strings.Join(types, " ") != "message_start content_block_start content_block_delta content_block_stop message_delta message_stop" {
		t.Fatalf("event types %v", types)
	}
	block := ev[1]["content_block"].(map[string]any)
	if block["type"] != "tool_use" || block["name"] != "mcp__inv__lookup" {
		t.Fatalf("content block %v", block)
	}
	if got := ev[2]["delta"].(map[string]any)["partial_json"]; got != `{"sku":"W-1"}` {
		t.Errorf("arguments %v", got)
	}
	if got := ev[4]["delta"].(map[string]any)["stop_reason"]; got != "tool_use" {
		t.Errorf("stop_reason %v", got)
	}
	id := block["id"].(string)

	// The agent answers the tool call; an extra message after the result
	// (Claude Code adds one with role "system") does not hide it.
	body := `{"model":"m","stream":false,"tools":[{"name":"mcp__inv__lookup"}],"messages":[
		{"role":"user","content":"go"},
		{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"mcp__inv__lookup","input":{"sku":"W-1"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","is_error":true,"content":[{"type":"text","text":"refused"},{"type":"text","text":"twice"}]}]},
		{"role":"system","content":[{"type":"text","text":"keep the user updated"}]}]}`
	_, second := post(t, url, body)
	var msg struct {
		Content    []map[string]any `json:"content"`
		StopReason string           `json:"stop_reason"`
	}
	if err := json.Unmarshal([]byte(second), &msg); err != nil {
		t.Fatalf("non-streamed answer %q: %v", second, err)
	}
	if msg.StopReason != "end_turn" || len(msg.Content) != 1 || msg.Content[0]["text"] != "all done" {
		t.Errorf("non-streamed answer %q", second)
	}

	got := s.ResultsFor("mcp__inv__lookup")
	want := ToolResult{CallID: id, Name: "mcp__inv__lookup", Text: "refused\ntwice", IsError: true}
	if len(got) != 1 || got[0] != want {
		t.Errorf("ResultsFor = %+v, want [%+v]", got, want)
	}
	if n := len(s.Turns()); n != 2 || s.Remaining() != 0 || s.Err() != nil {
		t.Errorf("turns %d, remaining %d, err %v; want 2, 0, nil", n, s.Remaining(), s.Err())
	}

	// A turn after the last step is an error the test can see.
	post(t, url, `{"model":"m","tools":[{"name":"x"}],"messages":[{"role":"user","content":"more"}]}`)
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "after the last step") {
		t.Errorf("Err() = %v, want the exhausted script named", err)
	}
}

func TestGeminiScriptAndPause(t *testing.T) {
	p := NewPauser()
	s := start(t, Script{
		{Tool: "mcp_inv_lookup", Args: map[string]any{"sku": "W-1"}},
		{Before: p.Hook, Decide: func(req Request) Step {
			if len(req.Result) == 1 && req.Result[0].IsError {
				return Step{Tool: "mcp_inv_lookup", Args: map[string]any{"sku": "W-2"}}
			}
			return Step{Text: "fine"}
		}},
	})
	url := s.URL() + "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
	tools := `"tools":[{"functionDeclarations":[{"name":"mcp_inv_lookup"}]}]`

	_, side := post(t, s.URL()+"/v1beta/models/gemini-lite:generateContent", `{"contents":[{"role":"user","parts":[{"text":"route"}]}],"generationConfig":{"responseMimeType":"application/json"}}`)
	if !strings.Contains(side, `next_speaker`) {
		t.Errorf("JSON side request answered %q", side)
	}

	_, first := post(t, url, `{"contents":[{"role":"user","parts":[{"text":"go"}]}],`+tools+`}`)
	ev := sseData(t, first)
	if len(ev) != 1 || !strings.Contains(first, `"functionCall":{"args":{"sku":"W-1"},"name":"mcp_inv_lookup"}`) {
		t.Fatalf("first answer %q", first)
	}

	done := make(chan string, 1)
	go func() {
		resp, err := http.Post(url, "application/json", strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"go"}]},
			{"role":"model","parts":[{"functionCall":{"name":"mcp_inv_lookup","args":{"sku":"W-1"}}}]},
			{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"mcp_inv_lookup","response":{"error":"MCP error -31021: approval_denied"}}}]}],`+tools+`}`))
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := p.Wait(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := ToolResult{CallID: "c1", Name: "mcp_inv_lookup", Text: `{"error":"MCP error -31021: approval_denied"}`, IsError: true}
	if len(req.Result) != 1 || req.Result[0] != want {
		t.Fatalf("paused request results %+v, want [%+v]", req.Result, want)
	}
	select {
	case got := <-done:
		t.Fatalf("the paused step answered before Resume: %q", got)
	default:
	}
	p.Resume()
	if got := <-done; !strings.Contains(got, `"sku":"W-2"`) {
		t.Errorf("the decided step answered %q, want the retry with W-2", got)
	}
	if err := s.WaitTurns(ctx, 2); err != nil {
		t.Error(err)
	}
}

func TestResponsesScript(t *testing.T) {
	s := start(t, Script{
		{Tool: "mcp__inv__lookup", Args: map[string]any{"sku": "W-1"}},
		{Tool: "exec_command", Args: map[string]any{"cmd": "true"}},
		{Text: "all done"},
	})
	url := s.URL() + "/v1/responses"
	tools := `"tools":[{"type":"function","name":"exec_command"},{"type":"web_search"},
		{"type":"namespace","name":"mcp__inv","tools":[{"type":"function","name":"lookup"},{"type":"function","name":"adjust"}]}]`

	// A side request (no tools) consumes no step.
	_, side := post(t, url, `{"model":"m","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"title?"}]}]}`)
	if ev := sseData(t, side); len(ev) != 5 || ev[2]["delta"] != "ok" {
		t.Fatalf("side request answered %q", side)
	}

	resp, first := post(t, url, `{"model":"m","stream":true,`+tools+`,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}]}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	ev := sseData(t, first)
	var types []string
	for _, e := range ev {
		types = append(types, e["type"].(string))
	}
	if strings.Join(types, " ") != "response.created response.output_item.added response.output_item.done response.completed" {
		t.Fatalf("event types %v", types)
	}
	// A namespaced tool is called as its function inside the namespace.
	item := ev[2]["item"].(map[string]any)
	if item["type"] != "function_call" || item["name"] != "lookup" || item["namespace"] != "mcp__inv" || item["arguments"] != `{"sku":"W-1"}` {
		t.Fatalf("output item %v", item)
	}
	if done := ev[3]["response"].(map[string]any); done["status"] != "completed" || done["id"] != ev[0]["response"].(map[string]any)["id"] {
		t.Errorf("response.completed %v", done)
	}
	if got := s.Turns()[0].Tools; strings.Join(got, " ") != "exec_command web_search mcp__inv__lookup mcp__inv__adjust" {
		t.Errorf("offered tools %v", got)
	}
	callID := item["call_id"].(string)

	// The agent sends the output back, with the history (and a message of
	// its own after it); a function of no namespace keeps its name.
	history := `{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]},
		{"type":"function_call","name":"lookup","namespace":"mcp__inv","arguments":"{\"sku\":\"W-1\"}","call_id":"` + callID + `"},
		{"type":"function_call_output","call_id":"` + callID + `","output":[{"type":"input_text","text":"Output:"},{"type":"input_text","text":"refused"}]},
		{"type":"message","role":"developer","content":[{"type":"input_text","text":"keep going"}]}`
	_, second := post(t, url, `{"model":"m","stream":true,`+tools+`,"input":[`+history+`]}`)
	if item := sseData(t, second)[2]["item"].(map[string]any); item["name"] != "exec_command" || item["namespace"] != nil {
		t.Fatalf("second output item %v", item)
	}
	got := s.ResultsFor("mcp__inv__lookup")
	want := ToolResult{CallID: callID, Name: "mcp__inv__lookup", Text: "Output:\nrefused"}
	if len(got) != 1 || got[0] != want {
		t.Errorf("ResultsFor = %+v, want [%+v]", got, want)
	}

	// A string output, and a non-streamed answer.
	_, third := post(t, url, `{"model":"m",`+tools+`,"input":[`+history+`,
		{"type":"function_call","name":"exec_command","arguments":"{}","call_id":"call_x"},
		{"type":"function_call_output","call_id":"call_x","output":"exit 0"}]}`)
	var out struct {
		Status string `json:"status"`
		Output []struct {
			Type    string `json:"type"`
			Role    string `json:"role"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(third), &out); err != nil {
		t.Fatalf("non-streamed answer %q: %v", third, err)
	}
	if out.Status != "completed" || len(out.Output) != 1 || out.Output[0].Role != "assistant" || out.Output[0].Content[0].Text != "all done" {
		t.Errorf("non-streamed answer %q", third)
	}
	if r := s.Turns()[2].Result; len(r) != 1 || r[0].Text != "exit 0" || r[0].CallID != "call_x" {
		t.Errorf("third request's results %+v", r)
	}
	if s.Remaining() != 0 || s.Err() != nil {
		t.Errorf("remaining %d, err %v", s.Remaining(), s.Err())
	}
}
