package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// geminiRequest is the part of a generateContent request the server reads.
type geminiRequest struct {
	Contents []struct {
		Role  string       `json:"role"`
		Parts []geminiPart `json:"parts"`
	} `json:"contents"`
	Tools []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	GenerationConfig struct {
		ResponseMimeType string `json:"responseMimeType"`
	} `json:"generationConfig"`
}

type geminiPart struct {
	Text             string `json:"text,omitempty"`
	FunctionResponse *struct {
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse,omitempty"`
}

func (s *Server) gemini(w http.ResponseWriter, r *http.Request, body []byte, stream bool) {
	var in geminiRequest
	req := Request{API: Gemini, Seq: s.newSeq(), Path: r.URL.RequestURI(), Body: json.RawMessage(body), Step: -1}
	if err := json.Unmarshal(body, &in); err != nil {
		s.fail(fmt.Errorf("fakemodel: generateContent request: %w", err))
		s.record(req)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": 400, "message": err.Error(), "status": "INVALID_ARGUMENT"}})
		return
	}
	for _, t := range in.Tools {
		for _, d := range t.FunctionDeclarations {
			req.Tools = append(req.Tools, d.Name)
		}
	}
	for i := len(in.Contents) - 1; i >= 0 && in.Contents[i].Role != "model"; i-- {
		var results []ToolResult
		for _, p := range in.Contents[i].Parts {
			if fr := p.FunctionResponse; fr != nil {
				tr := ToolResult{CallID: fr.ID, Name: fr.Name, Text: string(fr.Response)}
				var resp map[string]json.RawMessage
				if json.Unmarshal(fr.Response, &resp) == nil {
					_, tr.IsError = resp["error"]
				}
				results = append(results, tr)
			}
		}
		req.Result = append(results, req.Result...)
	}
	var st Step
	switch {
	case len(req.Tools) > 0:
		st = s.answer(&req)
	case in.GenerationConfig.ResponseMimeType == "application/json":
		// A side request that wants JSON (Gemini CLI's checks of who
		// speaks next and which model to route to): a small object with
		// the members those read.
		st = Step{Text: `{"reasoning":"scripted model","next_speaker":"user","model_choice":"flash","complexity_reasoning":"scripted model","complexity_score":1}`}
	default:
		st = Step{Text: "ok"}
	}
	s.record(req)

	part := map[string]any{"text": st.Text}
	if st.Tool != "" {
		args := st.Args
		if args == nil {
			args = map[string]any{}
		}
		part = map[string]any{"functionCall": map[string]any{"name": st.Tool, "args": args}}
	}
	resp := map[string]any{
		"candidates": []any{map[string]any{
			"content":      map[string]any{"role": "model", "parts": []any{part}},
			"finishReason": "STOP",
			"index":        0,
		}},
		"usageMetadata": map[string]any{"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
		"modelVersion":  "fakemodel",
	}
	if !stream {
		writeJSON(w, resp)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	sse(w, "", resp)
}
