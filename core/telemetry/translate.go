package telemetry

import (
	"context"
	"encoding/json"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
)

// Attribute keys. The MCP and GenAI ones are OpenTelemetry's semantic
// conventions (development status); Portcullis's own are under
// "portcullis." (docs/CONFIGURATION.md, "Telemetry", lists them).
const (
	KeyMCPMethod     = "mcp.method.name"
	KeyMCPSession    = "mcp.session.id"
	KeyToolName      = "gen_ai.tool.name"
	KeyOperation     = "gen_ai.operation.name"
	KeyTransport     = "network.transport"
	KeyErrorType     = "error.type"
	KeyAgentRun      = "portcullis.agent_run"
	KeyServer        = "portcullis.server.label"
	KeyEpoch         = "portcullis.epoch"
	KeyRevision      = "portcullis.catalog.revision"
	KeyCall          = "portcullis.call"
	KeyDecision      = "portcullis.decision"
	KeyPolicy        = "portcullis.policy"
	KeyGrant         = "portcullis.grant"
	KeyArgsDigest    = "portcullis.arguments.digest"
	KeyArgKeys       = "portcullis.arguments.keys"
	KeyArguments     = "portcullis.arguments"
	KeyOutcome       = "portcullis.outcome"
	KeyRefusal       = "portcullis.refusal.kind"
	KeyRequest       = "portcullis.approval.request"
	KeyApprovalState = "portcullis.approval.result"
	KeyDecider       = "portcullis.approval.decider"
	KeyToolScope     = "portcullis.approval.tools"
	KeyCredScope     = "portcullis.approval.credentials"
	KeyExpires       = "portcullis.approval.expires"
	KeyAuditSeq      = "portcullis.audit.seq"
	KeyAuditHash     = "portcullis.audit.hash"
	KeyEntryDigest   = "portcullis.entry.digest"
	KeyExeDigest     = "portcullis.executable.digest"
	KeyLockDigest    = "portcullis.lockfile.digest"
	KeyOldEpoch      = "portcullis.epoch.previous"
	KeyCause         = "portcullis.cause"
)

// Bounds of the translator's memory: calls and waits open at once, and
// approvals remembered for the calls their grant lets through.
const (
	maxOpen      = 4096
	maxApprovals = 1024
)

// translator turns audit events into spans, log records and metrics. Only
// the Exporter's goroutine uses it.
type translator struct {
	tracer trace.Tracer
	logger otellog.Logger
	meter  metric.Meter
	args   map[string]bool // server labels whose argument values are exported

	calls     map[ids.CallID]openCall           // call ULID → its span, while it runs
	waits     map[ids.RequestID]openWait        // approval request → the span of the wait on the person
	approvals map[ids.GrantID]trace.SpanContext // grant id → the span of the wait that granted it
	epochs    map[ids.EpochID]struct{}          // epochs counted

	mCalls, mRefusals, mApprovals, mEpochs metric.Int64Counter
	mDuration, mApprovalWait               metric.Float64Histogram
}

type openCall struct {
	span   trace.Span
	server string
	tool   string
	start  time.Time
}

type openWait struct {
	span   trace.Span
	server string
	start  time.Time
}

func (t *translator) init(tr trace.Tracer, lg otellog.Logger, m metric.Meter, args []string) error {
	t.tracer, t.logger, t.meter = tr, lg, m
	t.args = map[string]bool{}
	for _, a := range args {
		t.args[a] = true
	}
	t.calls, t.waits = map[ids.CallID]openCall{}, map[ids.RequestID]openWait{}
	t.approvals, t.epochs = map[ids.GrantID]trace.SpanContext{}, map[ids.EpochID]struct{}{}
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		return c
	}
	hist := func(name, desc string) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		return h
	}
	t.mCalls = counter("portcullis.calls", "{call}", "Tool calls forwarded to a server, by server, tool and decision")
	t.mRefusals = counter("portcullis.refusals", "{refusal}", "Requests answered with a refusal, by server and kind")
	t.mApprovals = counter("portcullis.approvals", "{approval}", "Approval requests decided or withdrawn, by server and result")
	t.mEpochs = counter("portcullis.epochs", "{epoch}", "Execution epochs started, by server")
	t.mDuration = hist("mcp.server.operation.duration", "Duration of tools/call from forwarding to the answer")
	t.mApprovalWait = hist("portcullis.approval.duration", "Time the person took to decide an approval request")
	return err
}

// event exports ev: the calls, approvals and epochs it opens or ends as
// spans and metrics, and a log record for each kind a person reads.
func (t *translator) event(ev audit.Event) {
	switch ev.Type {
	case audit.TypeToolCalled:
		withFields(ev, func(f audit.ToolCalled) { t.toolCalled(ev, f) })
	case audit.TypeToolCompleted:
		withFields(ev, func(f audit.ToolCompleted) { t.toolCompleted(ev, f) })
	case audit.TypeCallRefused:
		withFields(ev, func(f audit.CallRefused) { t.callRefused(ev, f) })
	case audit.TypeApprovalRequested:
		withFields(ev, func(f audit.ApprovalRequested) { t.approvalRequested(ev, f) })
	case audit.TypeApprovalGranted:
		withFields(ev, func(f audit.ApprovalGranted) {
			t.approvalDecided(ev, f.Request, f.ServerLabel, f.Epoch, "granted", f.Channel,
				attribute.String("portcullis.approval.authentication", f.Authentication),
				idAttr(KeyGrant, f.Grant), attribute.StringSlice(KeyToolScope, f.ToolScope), attribute.StringSlice(KeyCredScope, f.CredentialScope), attribute.String(KeyExpires, f.ExpiresWhen))
		})
	case audit.TypeApprovalDenied:
		withFields(ev, func(f audit.ApprovalDenied) {
			result := "denied"
			if f.Reason != "" && f.Reason != "denied" {
				result = f.Reason // timeout, audit_unavailable
			}
			t.approvalDecided(ev, f.Request, f.ServerLabel, f.Epoch, result, f.By)
		})
	case audit.TypeApprovalWithdrawn:
		withFields(ev, func(f audit.ApprovalWithdrawn) {
			t.approvalDecided(ev, f.Request, f.ServerLabel, f.Epoch, "withdrawn", "", attribute.String("portcullis.approval.reason", f.Reason))
		})
	case audit.TypeServerStarted:
		withFields(ev, func(f audit.ServerStarted) { t.serverStarted(ev, f) })
	case audit.TypeServerReplaced:
		withFields(ev, func(f audit.ServerReplaced) {
			t.epoch(f.ServerLabel, f.NewEpoch)
			t.emit(ev, otellog.SeverityWarn, "server replaced: "+f.ServerLabel,
				attribute.String(KeyServer, f.ServerLabel), idAttr(KeyAgentRun, f.AgentRun),
				idAttr(KeyOldEpoch, f.OldEpoch), idAttr(KeyEpoch, f.NewEpoch), attribute.String(KeyCause, f.Cause))
		})
	case audit.TypeDecisionRefused:
		withFields(ev, func(f audit.DecisionRefused) {
			t.emit(ev, otellog.SeverityWarn, "decision refused: "+f.What+" asked by a process that is not the person",
				attribute.String("portcullis.decision.what", f.What), attribute.String(KeyRefusal, f.Refusal),
				idAttr(KeyRequest, f.Request), attribute.String(KeyServer, f.ServerLabel), idAttr(KeyAgentRun, f.AgentRun))
		})
	case audit.TypeLogTampered:
		t.emit(ev, otellog.SeverityError, "audit log tampered with: a file it writes was replaced or deleted, or it no longer holds its last seal")
	case audit.TypeLogTamperAcknowledged:
		t.emit(ev, otellog.SeverityWarn, "audit log tampering acknowledged by the person")
	}
}

// withFields calls export with ev's fields decoded as F. An event whose
// fields do not decode as its type's is not exported (the audit log, not
// telemetry, is the record).
func withFields[F any](ev audit.Event, export func(F)) {
	var f F
	if ev.DecodeFields(&f) == nil {
		export(f)
	}
}

// idAttr is the attribute of an identifier.
func idAttr[T ~string](key string, id T) attribute.KeyValue {
	return attribute.String(key, string(id))
}

// callAttrs are the attributes of a call's span.
func callAttrs(run ids.RunID, server string, epoch ids.EpochID, tool string) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(KeyMCPMethod, "tools/call"), idAttr(KeyMCPSession, run),
		attribute.String(KeyToolName, tool), attribute.String(KeyOperation, "execute_tool"),
		attribute.String(KeyTransport, "pipe"),
		idAttr(KeyAgentRun, run), attribute.String(KeyServer, server), idAttr(KeyEpoch, epoch),
	}
}

// policyOf is the tool's policy as the decision shows it: a call that
// went ahead on the policy alone was allow; one a grant covered, approve.
func policyOf(decision string) string {
	switch decision {
	case "allow":
		return "allow"
	case "grant":
		return "approve"
	}
	return ""
}

func (t *translator) toolCalled(ev audit.Event, f audit.ToolCalled) {
	attrs := append(callAttrs(f.AgentRun, f.ServerLabel, f.Epoch, f.Tool),
		attribute.Int64(KeyRevision, int64(f.CatalogRevision)), idAttr(KeyCall, f.Call),
		attribute.String(KeyDecision, f.Decision), attribute.String(KeyArgsDigest, f.ArgsDigest),
		attribute.StringSlice(KeyArgKeys, f.ArgKeys), attribute.Int64(KeyAuditSeq, int64(ev.Seq)))
	if p := policyOf(f.Decision); p != "" {
		attrs = append(attrs, attribute.String(KeyPolicy, p))
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(ev.TS), trace.WithSpanKind(trace.SpanKindServer)}
	if f.Grant != "" {
		attrs = append(attrs, idAttr(KeyGrant, f.Grant))
		if sc, ok := t.approvals[f.Grant]; ok {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	if len(f.CredentialScope) > 0 {
		attrs = append(attrs, attribute.StringSlice(KeyCredScope, f.CredentialScope))
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	_, span := t.tracer.Start(context.Background(), "execute_tool "+f.Tool, opts...)
	t.mCalls.Add(context.Background(), 1, metric.WithAttributes(attribute.String(KeyServer, f.ServerLabel),
		attribute.String(KeyToolName, f.Tool), attribute.String(KeyDecision, f.Decision)))
	if len(t.calls) >= maxOpen {
		// A call that never completed (the daemon's record of it was
		// lost): end the oldest rather than grow without bound.
		t.endOldestCall()
	}
	t.calls[f.Call] = openCall{span: span, server: f.ServerLabel, tool: f.Tool, start: ev.TS}
}

func (t *translator) endOldestCall() {
	var oldest ids.CallID
	var at time.Time
	for id, c := range t.calls {
		if oldest == "" || c.start.Before(at) {
			oldest, at = id, c.start
		}
	}
	if c, ok := t.calls[oldest]; ok {
		c.span.SetAttributes(attribute.String(KeyOutcome, "unknown"))
		c.span.End()
		delete(t.calls, oldest)
	}
}

// arguments puts the argument values of call on its span, for a server
// that exports them.
func (t *translator) arguments(call ids.CallID, args json.RawMessage) {
	c, ok := t.calls[call]
	if !ok || !t.args[c.server] {
		return
	}
	c.span.SetAttributes(attribute.String(KeyArguments, string(args)))
}

func (t *translator) toolCompleted(ev audit.Event, f audit.ToolCompleted) {
	c, ok := t.calls[f.Call]
	if !ok {
		return
	}
	delete(t.calls, f.Call)
	c.span.SetAttributes(attribute.String(KeyOutcome, f.Outcome))
	attrs := []attribute.KeyValue{attribute.String(KeyMCPMethod, "tools/call"), attribute.String(KeyToolName, f.Tool),
		attribute.String(KeyServer, f.ServerLabel), attribute.String(KeyOutcome, f.Outcome)}
	if f.Outcome != "ok" {
		c.span.SetAttributes(attribute.String(KeyErrorType, f.Outcome))
		c.span.SetStatus(codes.Error, f.Outcome)
		attrs = append(attrs, attribute.String(KeyErrorType, f.Outcome))
	}
	t.mDuration.Record(context.Background(), ev.TS.Sub(c.start).Seconds(), metric.WithAttributes(attrs...))
	c.span.End(trace.WithTimestamp(ev.TS))
}

func (t *translator) callRefused(ev audit.Event, f audit.CallRefused) {
	ctx := context.Background()
	t.mRefusals.Add(ctx, 1, metric.WithAttributes(attribute.String(KeyServer, f.ServerLabel), attribute.String(KeyRefusal, f.Kind)))
	epoch := f.CurrentEpoch
	if f.Epoch != "" {
		epoch = f.Epoch
	}
	var span trace.Span
	if c, ok := t.calls[f.Call]; ok && f.Call != "" {
		delete(t.calls, f.Call)
		span = c.span
	} else if f.Tool != "" && (f.Method == "" || f.Method == "tools/call") {
		// Refused before it was forwarded: a span of its own, for the
		// moment of the refusal.
		attrs := callAttrs(f.AgentRun, f.ServerLabel, epoch, f.Tool)
		if f.CatalogRevision != 0 {
			attrs = append(attrs, attribute.Int64(KeyRevision, int64(f.CatalogRevision)))
		}
		opts := []trace.SpanStartOption{trace.WithTimestamp(ev.TS), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
		if w, ok := t.waits[f.Request]; ok && f.Request != "" {
			// The approval raised with the refusal (authorization_stale).
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: w.span.SpanContext()}))
		}
		_, span = t.tracer.Start(ctx, "execute_tool "+f.Tool, opts...)
	}
	attrs := []attribute.KeyValue{attribute.String(KeyRefusal, f.Kind), attribute.String(KeyErrorType, f.Kind), attribute.String(KeyOutcome, "refused")}
	if f.ApprovedEpoch != "" {
		attrs = append(attrs, idAttr("portcullis.epoch.approved", f.ApprovedEpoch))
	}
	if f.Request != "" {
		attrs = append(attrs, idAttr(KeyRequest, f.Request))
	}
	var sc trace.SpanContext
	if span != nil {
		span.SetAttributes(attrs...)
		span.SetStatus(codes.Error, f.Kind)
		sc = span.SpanContext()
		span.End(trace.WithTimestamp(ev.TS))
	}
	method := f.Method
	if method == "" {
		method = "tools/call"
	}
	t.emitIn(sc, ev, otellog.SeverityWarn, "call refused: "+f.Kind, append(attrs,
		attribute.String(KeyServer, f.ServerLabel), idAttr(KeyAgentRun, f.AgentRun),
		attribute.String(KeyMCPMethod, method), attribute.String(KeyToolName, f.Tool), idAttr(KeyEpoch, epoch))...)
}

func (t *translator) approvalRequested(ev audit.Event, f audit.ApprovalRequested) {
	attrs := []attribute.KeyValue{idAttr(KeyRequest, f.Request), idAttr(KeyAgentRun, f.AgentRun),
		idAttr(KeyMCPSession, f.AgentRun), attribute.String(KeyServer, f.ServerLabel), idAttr(KeyEpoch, f.Epoch),
		attribute.StringSlice(KeyToolScope, f.ToolScope), attribute.StringSlice(KeyCredScope, f.CredentialScope)}
	if f.CatalogRevision != 0 {
		attrs = append(attrs, attribute.Int64(KeyRevision, int64(f.CatalogRevision)))
	}
	if f.ServerRequest != "" {
		attrs = append(attrs, attribute.String("portcullis.server_request", f.ServerRequest))
	}
	_, span := t.tracer.Start(context.Background(), "portcullis.approval", trace.WithTimestamp(ev.TS),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if len(t.waits) >= maxOpen {
		for id, w := range t.waits { // any: a wait never decided
			w.span.End()
			delete(t.waits, id)
			break
		}
	}
	t.waits[f.Request] = openWait{span: span, server: f.ServerLabel, start: ev.TS}
	t.emitIn(span.SpanContext(), ev, otellog.SeverityInfo, "approval requested: "+f.ServerLabel, attrs...)
}

// approvalDecided ends the wait on the person for request; a granted
// one is remembered under its grant's id (the attribute KeyGrant of more)
// for the calls the grant lets through.
func (t *translator) approvalDecided(ev audit.Event, request ids.RequestID, server string, epoch ids.EpochID, result, by string, more ...attribute.KeyValue) {
	ctx := context.Background()
	attrs := append([]attribute.KeyValue{idAttr(KeyRequest, request), attribute.String(KeyServer, server),
		idAttr(KeyEpoch, epoch), attribute.String(KeyApprovalState, result)}, more...)
	if by != "" {
		attrs = append(attrs, attribute.String(KeyDecider, by))
	}
	var sc trace.SpanContext
	if w, ok := t.waits[request]; ok {
		delete(t.waits, request)
		w.span.SetAttributes(attrs...)
		if result != "granted" {
			w.span.SetStatus(codes.Error, result)
		}
		w.span.End(trace.WithTimestamp(ev.TS))
		sc = w.span.SpanContext()
		t.mApprovalWait.Record(ctx, ev.TS.Sub(w.start).Seconds(), metric.WithAttributes(attribute.String(KeyServer, server), attribute.String(KeyApprovalState, result)))
		for _, a := range more {
			if a.Key == KeyGrant && a.Value.AsString() != "" {
				if len(t.approvals) >= maxApprovals {
					clear(t.approvals)
				}
				t.approvals[ids.GrantID(a.Value.AsString())] = sc
			}
		}
	}
	t.mApprovals.Add(ctx, 1, metric.WithAttributes(attribute.String(KeyServer, server), attribute.String(KeyApprovalState, result)))
	t.emitIn(sc, ev, otellog.SeverityInfo, "approval "+result+": "+server, attrs...)
}

func (t *translator) epoch(server string, epoch ids.EpochID) {
	if epoch == "" {
		return
	}
	if _, ok := t.epochs[epoch]; ok {
		return
	}
	if len(t.epochs) >= maxOpen {
		clear(t.epochs)
	}
	t.epochs[epoch] = struct{}{}
	t.mEpochs.Add(context.Background(), 1, metric.WithAttributes(attribute.String(KeyServer, server)))
}

// serverStarted: a new epoch, with the digests of the code it runs (never
// its command line, environment or paths: they may hold secrets).
func (t *translator) serverStarted(ev audit.Event, f audit.ServerStarted) {
	t.epoch(f.ServerLabel, f.Epoch)
	attrs := []attribute.KeyValue{attribute.String(KeyServer, f.ServerLabel), idAttr(KeyAgentRun, f.AgentRun), idAttr(KeyEpoch, f.Epoch)}
	var rec identity.Record
	if len(f.Execution) > 0 && json.Unmarshal(f.Execution, &rec) == nil {
		if rec.EntryDigest != "" {
			attrs = append(attrs, attribute.String(KeyEntryDigest, rec.EntryDigest))
		}
		if rec.ResolvedExecutable.SHA256 != "" {
			attrs = append(attrs, attribute.String(KeyExeDigest, rec.ResolvedExecutable.SHA256))
		}
		if rec.LockfileDigest != "" {
			attrs = append(attrs, attribute.String(KeyLockDigest, rec.LockfileDigest))
		}
		if rec.Runtime != "" {
			attrs = append(attrs, attribute.String("portcullis.runtime", rec.Runtime))
		}
	}
	t.emit(ev, otellog.SeverityInfo, "server started: "+f.ServerLabel, attrs...)
}

func (t *translator) emit(ev audit.Event, sev otellog.Severity, body string, attrs ...attribute.KeyValue) {
	t.emitIn(trace.SpanContext{}, ev, sev, body, attrs...)
}

// emitIn emits a log record of ev, in the span sc when it is valid (the
// record then carries its trace and span ids).
func (t *translator) emitIn(sc trace.SpanContext, ev audit.Event, sev otellog.Severity, body string, attrs ...attribute.KeyValue) {
	ctx := context.Background()
	if sc.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	var r otellog.Record
	r.SetEventName("portcullis." + ev.Type)
	r.SetTimestamp(ev.TS)
	r.SetSeverity(sev)
	r.SetBody(attribute.StringValue(body))
	r.AddAttributes(attribute.Int64(KeyAuditSeq, int64(ev.Seq)), attribute.String(KeyAuditHash, ev.Hash))
	for _, a := range attrs {
		if a.Value.Type() == attribute.STRING && a.Value.AsString() == "" {
			continue
		}
		r.AddAttributes(a)
	}
	t.logger.Emit(ctx, r)
}

// endOpen ends the spans still open at shutdown.
func (t *translator) endOpen() {
	for id, c := range t.calls {
		c.span.SetAttributes(attribute.String(KeyOutcome, "unknown"))
		c.span.End()
		delete(t.calls, id)
	}
	for id, w := range t.waits {
		w.span.End()
		delete(t.waits, id)
	}
}
