// Package audit is Portcullis's audit log: an append-only, hash-chained,
// optionally HMAC-signed record of what the daemon did on a person's behalf
// (servers started and replaced, catalog revisions, agent runs, approvals,
// tool calls and refusals).
//
// # Files
//
// The log lives in one directory (mode 0700) as JSON Lines files named
// audit-000001.jsonl, audit-000002.jsonl, … (mode 0600). A new file is started
// when the current one would grow past Options.MaxFileBytes; the chain simply
// continues into it. A small head.json next to them records the sequence
// number, hash and signature of the last durable event, overwritten in place
// (a fixed-size record) after every sync, so that the loss of whole trailing
// lines can be told apart from a log that simply ends.
// An advisory lock on audit.lock keeps a second daemon out of the directory.
//
// # Line format
//
// Every line is one event. Its canonical body C is the RFC 8785 (JSON
// Canonicalization Scheme) serialisation of
//
//	{"fields":{…},"prev":"sha256:…","seq":N,"ts":"RFC 3339 UTC","type":"…"}
//
// where fields holds the type-specific members (see the Type constants and the
// matching structs such as ToolCalled). The stored line is C with two more
// members placed before its closing brace, followed by a newline:
//
//	…,"type":"tool_called","hash":"sha256:<64 hex>","sig":"hmac-sha256:<64 hex>"}
//
// so every line is ordinary JSON that jq and friends can read. The members are
//
//	hash = "sha256:" + hex(SHA-256(prev || C))       prev as its ASCII text
//	sig  = "hmac-sha256:" + hex(HMAC-SHA256(key, hash))   only when a key is set
//
// The first event's prev is Genesis ("sha256:" followed by 64 zeros); every
// later event's prev is the hash of the event before it, across files.
// Because the writer produces C in canonical form, an independent verifier can
// parse a line, drop hash and sig, canonicalise with any RFC 8785
// implementation and obtain the same bytes; Verify checks exactly that the
// stored body is canonical.
//
// # Signing
//
// With a key (Options.Key) every event is signed. Signing may start later:
// the first signed event after unsigned ones is a signing_enabled event
// (SigningEnabled) naming the seq before it, written by Open with a key or by
// Log.EnableSigning. It may also be turned off, but never silently:
// Log.DisableSigning writes a signing_disabled event (SigningDisabled),
// signed with the key, after which events carry no signature until the next
// signing_enabled; this can repeat. Verify, with or without the key, accepts
// an unsigned event only in an unsigned prefix or after a signed
// signing_disabled, and lists the stretches written with signing off in
// Report.SigningOff: someone who could write the files then could have
// forged their events. Only the Log writes these two types (Append refuses
// them).
//
// # Seals and swapped files
//
// With Options.SealKeys, the Log seals itself forward-securely (Seal,
// SetupSeals, LogSealed): a log_sealed event signed with the current
// epoch's Ed25519 key certifies the next epoch's public key, and the key
// that signed it is erased. VerifyWith checks the seals from the person's
// VerificationKey on, and the log's genesis and end against an Anchor. At
// every commit the writer compares the open file (device and inode) with
// its path, and head.json with its path before every sync (head.json is
// written only after one, so it is never written to a swapped file); a file replaced or deleted under it makes
// it continue in a new file with a log_tampered event, reported by
// Tampered until AcknowledgeTampered. The format is in
// docs/AUDIT-FORMAT.md.
//
// # Durability and failure
//
// Append returns only after the event is written and synced (fdatasync on
// Linux; on macOS Go's File.Sync issues F_FULLFSYNC). AppendRecord returns
// once the event is written to the file and leaves its sync to a group
// commit within 10 ms or 256 events (see Durability for what each tier can
// lose, and Options.Durability for strict, where every event is synced
// first). The files are guarded by one mutex, and every caller writes its
// own event holding it (one write, no hand-off to another goroutine). The
// sync runs without the mutex, as a group commit: an Append whose event is
// not yet durable leads a sync when none runs — it covers every event
// written until it starts, by any caller — or waits for the running one,
// and for the next when that started before its event was written; a
// caller returns only once a completed sync covers its own event, and a
// failed sync fails every event waiting for it. Meanwhile other callers go
// on writing, and the record tier's group commit (its first event arms a
// timer of the writer goroutine) joins the same syncs. head.json is
// rewritten after each sync, naming the last event it covered. Control
// requests (signing, seals, Recover) and Open sync holding the mutex. Any write, sync, rotation or open failure makes
// the Log fail closed: that Append and every later one return an error
// wrapping ErrUnavailable until Recover succeeds (or the log is reopened), so
// the gateway can refuse calls with audit_unavailable and tell the person. An
// event whose Append failed may nevertheless be on disk (for example when the
// write succeeded and the fsync did not); it is then part of the chain.
//
// # Crashes
//
// A crash can leave a torn last line (a prefix of a line without its
// newline). Open and Recover never rewrite it: they append a newline if
// needed and a log_recovered event whose fields give the torn bytes' file,
// offset, length and SHA-256 digest, and the chain continues from the last
// whole event. Verify accepts such a region only when a matching
// log_recovered event follows it, and lists it in Report.Recovered. Whole
// lines that are not events (bytes holding a newline) are not what a crash
// leaves: Verify reports them as an edit, also when log_recovered recorded
// them (LogRecovered.Complete).
//
// # Secrets
//
// The log records epochs, runs, scopes and argument digests (ArgsSummary),
// never secret values: callers must not put credential values into fields.
package audit
