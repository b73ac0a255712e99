// Package catalog keeps the tool catalog of each MCP server label: what the tools
// say they are, as advertised by `tools/list` (MCP specification 2025-06-18 and
// 2025-11-25, "Tools", schema type Tool).
//
// It offers four things:
//
//   - Canonical tool digests ([ToolDigest]): SHA-256 over the RFC 8785 (JCS)
//     canonical form of the tool object, with the spec's defaults for
//     ToolAnnotations filled in (readOnlyHint false, destructiveHint true,
//     idempotentHint false, openWorldHint true), so that a server which starts
//     sending a default explicitly does not produce a new revision.
//   - Catalog revisions ([Store]): a revision number per server label that
//     increases by one whenever the set of tool digests changes and that survives
//     daemon restarts (one JSON file per label, written atomically, mode 0600).
//     The last [DefaultHistory] revisions are kept for diffing.
//   - Diffs ([Compare]): every difference between two revisions, classified into
//     a [Change] kind with a JSON pointer, old and new values, a [Severity] and a
//     sentence for the approval card.
//   - Argument checks ([Validator], [Defaults]): tools/call arguments validated
//     against the current revision's inputSchema (JSON Schema drafts 4 to
//     2020-12; a schema without $schema is read as 2020-12, as the 2025-11-25
//     spec says), and the defaults that omitted arguments will take.
//
// # What the digest covers
//
// The digest covers the whole tool object: the fields the spec lists (name,
// title, description, inputSchema, outputSchema, annotations, icons, _meta) and
// any other top-level field the server sends (for example the 2025-11-25
// `execution` object). Ignoring unknown fields would let a server change bytes
// that the agent receives (the agent's tools/list is answered from the stored
// revision with unknown fields preserved) without a new revision. Unknown fields
// are compared verbatim and reported as "field_changed". Tools whose JSON has
// duplicate object keys or numbers outside the IEEE 754 double range are
// rejected: their meaning would depend on the reader. Strings that are not
// valid Unicode (invalid UTF-8 bytes, lone surrogate escapes; RFC 8259 section
// 8.2) are read as encoding/json reads them, each such byte or escape as
// U+FFFD, in the digest and in the bytes kept for the agent, and [Store] logs
// that it happened: rejecting them would leave the server without a catalog
// (no diffs, no argument checks) over a stray byte in a description. As RFC
// 8785 says, integers above 2^53 lose precision in the canonical form.
//
// The catalog digest is SHA-256 over the sorted tool digests, so a server that
// only reorders its tools keeps its revision (the stored order is kept).
//
// # Severity rule table
//
// A [Change] is "authority" when it can widen what a call does or which calls
// can be made, "contract" when it changes what the model must send or reads
// without widening, and "cosmetic" when only display text changes.
//
//	kind                          when                                        severity
//	tool_added                    a new tool name                             authority
//	tool_renamed                  same contract (all but name, title,         authority (the new name is
//	                              annotations.title, icons), one-to-one       not covered by grants)
//	tool_removed                  a tool is gone                              contract
//	title_changed                 title, annotations.title, schema title      cosmetic
//	icons_changed                 icons                                       cosmetic
//	description_changed           text differs beyond whitespace and          authority (the model follows
//	                              spelling (tool or any schema inside         it; it says what the tool
//	                              inputSchema)                                does, and the person read it)
//	                              a spelling fix: the same words, at most     cosmetic
//	                              two changed, each by letter case or one
//	                              slip of the fingers (two adjacent letters
//	                              swapped; a letter struck for a neighbouring
//	                              QWERTY key; punctuation, a doubled letter
//	                              or a neighbouring key's letter added or
//	                              left out) in words of 4+ letters without
//	                              digits
//	                              only whitespace differs                     cosmetic
//	property_added                new property (optional or required)         authority
//	property_removed              property gone                               contract
//	required_added                existing property becomes required          contract
//	required_removed              property no longer required                 contract
//	type_narrowed                 new types ⊂ old types (number ⊃ integer),   contract
//	                              or a type appears
//	type_widened                  new types ⊃ old types, or type removed      authority
//	type_changed                  neither subset; malformed "type"            authority
//	                              different spelling of the same values       contract
//	enum_value_added              a value joins an enum                       authority
//	enum_value_removed            a value leaves an enum                      contract
//	enum_added / enum_removed     enum keyword appears / disappears           contract / authority
//	const_changed                 const appears                               contract
//	                              const changes or disappears                 authority
//	default_added, default_changed                                            authority
//	default_removed                                                           contract
//	bound_changed                 minimum, maximum, exclusiveMinimum,         contract when tightened;
//	                              exclusiveMaximum (number or draft-04        authority when loosened,
//	                              boolean), minLength, maxLength, minItems,   removed, or not comparable
//	                              maxItems, minProperties, maxProperties,     (pattern changed, multipleOf
//	                              multipleOf, uniqueItems, pattern            not a multiple, number↔bool);
//	                                                                          cosmetic for absent ↔ false
//	additional_properties_changed → false, or true/absent → a schema          contract
//	                              false → true/absent/schema, schema → true   authority
//	                              absent ↔ true                               cosmetic
//	order_changed                 same enum values / required names / types   cosmetic
//	                              in another order
//	schema_changed                any other JSON Schema keyword ($ref, anyOf, authority (cannot tell
//	                              format, $schema, …), a boolean schema       whether it widens; a schema
//	                              false → true, a malformed keyword           turning false: contract)
//	                              a keyword spelled differently with the      cosmetic
//	                              same meaning (absent ↔ "properties":{})
//	schema_annotation_changed     examples, $comment inside a schema          cosmetic
//	                              deprecated, readOnly, writeOnly             contract
//	output_schema_changed         outputSchema added, removed or changed      contract
//	annotation_changed            readOnlyHint true→false,                    authority (claims more power)
//	                              destructiveHint false→true,
//	                              idempotentHint true→false,
//	                              openWorldHint false→true
//	                              the opposite flips                          contract (looks safer; hints
//	                                                                          are not verified)
//	                              other annotation keys or non-boolean values contract
//	meta_changed                  _meta                                       contract
//	field_changed                 any other top-level field                   contract
//	tool_changed                  fallback if bytes differ and no rule above  authority
//	                              matched (tests check it never happens)
//
// Properties, items and additionalProperties schemas are compared recursively,
// so a change in a nested argument carries the nested JSON pointer. When a
// property is added or removed, its required-ness is told in that change and no
// separate required_added / required_removed change is emitted for it.
//
// Annotations are hints for display: they never decide whether a call gets
// credentials. They are classified only so the person sees what a tool now claims.
package catalog
