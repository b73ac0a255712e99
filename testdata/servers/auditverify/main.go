// Command auditverify is a second, independent verifier of Portcullis's
// audit log, written from docs/AUDIT-FORMAT.md with the standard library
// only (it does not import the project's audit package). The tests run it
// on the same logs as `portcullis audit verify --key` and compare.
//
//	auditverify -key PCVK1-… [-anchor FILE] [-hmac HEX] DIR
//
// It prints one JSON object {"ok","problem","detail","events","seals"} and
// exits 0 when the log verifies, 1 when it does not, 2 on bad usage.
//
// What it does not check: that each line is canonical RFC 8785 JSON (the
// hash covers the bytes as stored, so it is the content either way), torn
// tails and log_recovered regions (any line that is not an event fails),
// and head.json.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

type result struct {
	OK      bool   `json:"ok"`
	Problem string `json:"problem,omitempty"`
	Detail  string `json:"detail,omitempty"`
	Events  uint64 `json:"events"`
	Seals   int    `json:"seals"`
}

type event struct {
	Fields json.RawMessage `json:"fields"`
	Prev   string          `json:"prev"`
	Seq    uint64          `json:"seq"`
	TS     string          `json:"ts"`
	Type   string          `json:"type"`
	Hash   string          `json:"hash"`
	Sig    string          `json:"sig"`
}

type seal struct {
	Epoch     uint64 `json:"epoch"`
	Genesis   string `json:"genesis"`
	GenesisTS string `json:"genesisTs"`
	Next      string `json:"next"`
	Reason    string `json:"reason"`
	Sig       string `json:"sig"`
}

type anchor struct {
	Epoch uint64 `json:"epoch"`
	Seq   uint64 `json:"seq"`
	Hash  string `json:"hash"`
}

func main() {
	keyText := flag.String("key", "", "verification key")
	anchorPath := flag.String("anchor", "", "anchor file")
	hmacHex := flag.String("hmac", "", "HMAC-SHA256 key, hex (optional)")
	flag.Parse()
	if flag.NArg() != 1 || *keyText == "" {
		fmt.Fprintln(os.Stderr, "usage: auditverify -key PCVK1-… [-anchor FILE] [-hmac HEX] DIR")
		os.Exit(2)
	}
	epoch, pub, err := parseKey(*keyText)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mac []byte
	if *hmacHex != "" {
		if mac, err = hex.DecodeString(*hmacHex); err != nil {
			fmt.Fprintln(os.Stderr, "-hmac:", err)
			os.Exit(2)
		}
	}
	var an *anchor
	if *anchorPath != "" {
		if b, err := os.ReadFile(*anchorPath); err == nil {
			an = &anchor{}
			if err := json.Unmarshal(b, an); err != nil {
				fmt.Fprintln(os.Stderr, "-anchor:", err)
				os.Exit(2)
			}
		}
	}
	r := verify(flag.Arg(0), epoch, pub, mac, an)
	json.NewEncoder(os.Stdout).Encode(r)
	if !r.OK {
		os.Exit(1)
	}
}

// parseKey decodes PCVK1-…: base32 of epoch (8 bytes big-endian), the
// Ed25519 public key and 4 checksum bytes (SHA-256 of "PCVK1" + the 40).
func parseKey(s string) (uint64, ed25519.PublicKey, error) {
	t := strings.ToUpper(strings.ReplaceAll(strings.ReplaceAll(s, "-", ""), " ", ""))
	if !strings.HasPrefix(t, "PCVK1") {
		return 0, nil, fmt.Errorf("not a verification key")
	}
	b, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(t[5:])
	if err != nil || len(b) != 44 {
		return 0, nil, fmt.Errorf("not a verification key")
	}
	sum := sha256.Sum256(append([]byte("PCVK1"), b[:40]...))
	if !bytes.Equal(sum[:4], b[40:]) {
		return 0, nil, fmt.Errorf("checksum mismatch")
	}
	var e uint64
	for _, c := range b[:8] {
		e = e<<8 | uint64(c)
	}
	return e, ed25519.PublicKey(b[8:40]), nil
}

var fileRE = regexp.MustCompile(`^audit-(\d{6,})\.jsonl$`)

func verify(dir string, keyEpoch uint64, key ed25519.PublicKey, mac []byte, an *anchor) result {
	var r result
	fail := func(problem, format string, args ...any) result {
		r.Problem, r.Detail = problem, fmt.Sprintf(format, args...)
		return r
	}
	ents, _ := os.ReadDir(dir)
	type file struct {
		n    int
		name string
	}
	var files []file
	for _, e := range ents {
		if m := fileRE.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			files = append(files, file{n, e.Name()})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].n < files[j].n })
	prev := "sha256:" + strings.Repeat("0", 64)
	var expected uint64 = 1
	var genesis, genesisTS string
	nextEpoch, sealKey, proven := keyEpoch, key, false
	var tampered uint64
	for i, f := range files {
		if f.n != i+1 {
			return fail("deleted", "file %d is missing", i+1)
		}
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return fail("unreadable", "%v", err)
		}
		for _, ln := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
			if len(ln) == 0 {
				continue
			}
			var e event
			cut := bytes.LastIndex(ln, []byte(`,"hash":"`))
			if json.Unmarshal(ln, &e) != nil || cut < 0 {
				return fail("edited", "%s: a line that is not an event", f.name)
			}
			body := append(bytes.Clone(ln[:cut]), '}')
			h := sha256.Sum256(append([]byte(e.Prev), body...))
			if "sha256:"+hex.EncodeToString(h[:]) != e.Hash {
				return fail("edited", "seq %d does not match its hash", e.Seq)
			}
			if e.Seq != expected {
				if expected == 1 {
					return fail("starts-late", "the log starts at seq %d", e.Seq)
				}
				return fail("deleted", "seq %d follows seq %d", e.Seq, expected-1)
			}
			if e.Prev != prev {
				return fail("edited", "seq %d does not follow seq %d's hash", e.Seq, e.Seq-1)
			}
			if mac != nil && e.Sig != "" {
				m := hmac.New(sha256.New, mac)
				m.Write([]byte(e.Hash))
				if "hmac-sha256:"+hex.EncodeToString(m.Sum(nil)) != e.Sig {
					return fail("bad-signature", "seq %d", e.Seq)
				}
			}
			if e.Seq == 1 {
				genesis, genesisTS = e.Hash, e.TS
			}
			switch e.Type {
			case "log_tampered":
				tampered = e.Seq
			case "log_tamper_acknowledged":
				var a struct {
					Seq uint64 `json:"seq"`
				}
				if json.Unmarshal(e.Fields, &a) == nil && a.Seq == tampered {
					tampered = 0
				}
			case "log_sealed":
				var s seal
				if json.Unmarshal(e.Fields, &s) != nil {
					return fail("bad-seal", "seq %d", e.Seq)
				}
				if !proven && s.Epoch < keyEpoch {
					break // before a re-keying
				}
				if !proven && s.Epoch > keyEpoch {
					return fail("starts-late", "first seal is epoch %d, the key's is %d", s.Epoch, keyEpoch)
				}
				if s.Epoch != nextEpoch {
					return fail("bad-seal", "seq %d seals epoch %d, want %d", e.Seq, s.Epoch, nextEpoch)
				}
				msg := fmt.Sprintf("portcullis audit seal v1\n%d\n%s\n%s\n%d\n%s\n%s\n%s\n%s\n", e.Seq, e.Prev, e.TS, s.Epoch, s.Genesis, s.GenesisTS, s.Next, s.Reason)
				sig, err := hex.DecodeString(strings.TrimPrefix(s.Sig, "ed25519:"))
				if err != nil || !ed25519.Verify(sealKey, []byte(msg), sig) {
					return fail("bad-seal", "seal epoch %d at seq %d does not verify", s.Epoch, e.Seq)
				}
				wg, wts := genesis, genesisTS
				if e.Seq == 1 {
					wg, wts = "sha256:"+strings.Repeat("0", 64), e.TS
				}
				if s.Genesis != wg || s.GenesisTS != wts {
					return fail("starts-late", "seal epoch %d names another genesis", s.Epoch)
				}
				nk, err := hex.DecodeString(strings.TrimPrefix(s.Next, "ed25519:"))
				if err != nil || len(nk) != ed25519.PublicKeySize {
					return fail("bad-seal", "seal epoch %d: bad next key", s.Epoch)
				}
				sealKey, nextEpoch, proven = nk, s.Epoch+1, true
				r.Seals++
				if an != nil && an.Epoch == s.Epoch && (an.Seq != e.Seq || an.Hash != e.Hash) {
					return fail("edited", "the anchor's seal epoch %d differs", s.Epoch)
				}
			}
			prev = e.Hash
			expected++
			r.Events++
		}
	}
	switch {
	case tampered != 0:
		return fail("tampered", "log_tampered at seq %d not acknowledged", tampered)
	case r.Events == 0:
		return fail("empty", "no events")
	case !proven:
		return fail("unsealed", "no seal of epoch %d", keyEpoch)
	case an != nil && an.Epoch >= nextEpoch:
		return fail("ends-early", "the anchor's seal epoch %d is not in the log", an.Epoch)
	}
	r.OK = true
	return r
}
