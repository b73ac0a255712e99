package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Forward-secure seals (docs/AUDIT-FORMAT.md). The log is sealed in sealing
// epochs: a log_sealed event (LogSealed) names epoch i, covers the hash
// chain up to its own prev, and certifies the public key of epoch i+1; it
// is signed (Ed25519) with the private key of epoch i, which is then
// erased. The person holds the public key of the first epoch (the
// verification key, FormatVerificationKey); a key stolen during epoch j
// can sign seals j, j+1, … but not rewrite what seal j-1 covers.

// SealKey is the private key of one sealing epoch.
type SealKey struct {
	// Epoch is the sealing epoch this key signs the seal of.
	Epoch uint64
	// Private is the Ed25519 private key.
	Private ed25519.PrivateKey
	// Next, while a seal of Epoch is being written, is the key of the
	// epoch after it, which that seal certifies: stored before the seal,
	// so that a crash after the seal is durable does not lose it (Open
	// then finishes the change), nil otherwise.
	Next ed25519.PrivateKey
}

// SealKeyStore keeps the current sealing key. Replace must be durable and
// erase the key it replaces.
type SealKeyStore interface {
	// Load returns the stored key; an error matching ErrNoSealKey when none
	// is stored.
	Load() (SealKey, error)
	// Replace stores k in place of the stored key (if any), erasing it.
	Replace(k SealKey) error
}

var (
	// ErrNoSealKey means no sealing key is stored: the log is not sealed
	// (run `portcullis audit setup-keys`).
	ErrNoSealKey = errors.New("no audit sealing key is set up")
	// ErrSealKeysExist is returned by Log.SetupSeals without force when a
	// sealing key exists already: re-keying needs force.
	ErrSealKeysExist = errors.New("the audit log has sealing keys already")
)

// SealKeyFile is a SealKeyStore in one file (mode 0600): Linux keeps the
// key in the data directory, outside the audit directory.
type SealKeyFile struct{ Path string }

type sealKeyJSON struct {
	Version int    `json:"version"`
	Epoch   uint64 `json:"epoch"`
	Seed    string `json:"seed"`           // base64 of the Ed25519 seed
	Next    string `json:"next,omitempty"` // base64 seed of SealKey.Next
}

// Load reads the key file.
func (s SealKeyFile) Load() (SealKey, error) {
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return SealKey{}, ErrNoSealKey
	}
	if err != nil {
		return SealKey{}, fmt.Errorf("audit: reading the sealing key: %w", err)
	}
	defer clear(b)
	var j sealKeyJSON
	if err := json.Unmarshal(b, &j); err != nil || j.Version != 1 {
		return SealKey{}, fmt.Errorf("audit: %s is not a sealing key file (version 1)", s.Path)
	}
	seed, err := base64.StdEncoding.DecodeString(j.Seed)
	if err != nil || len(seed) != ed25519.SeedSize {
		return SealKey{}, fmt.Errorf("audit: %s does not hold an Ed25519 seed", s.Path)
	}
	defer clear(seed)
	k := SealKey{Epoch: j.Epoch, Private: ed25519.NewKeyFromSeed(seed)}
	if j.Next != "" {
		next, err := base64.StdEncoding.DecodeString(j.Next)
		if err != nil || len(next) != ed25519.SeedSize {
			return SealKey{}, fmt.Errorf("audit: %s does not hold an Ed25519 seed as next", s.Path)
		}
		defer clear(next)
		k.Next = ed25519.NewKeyFromSeed(next)
	}
	return k, nil
}

// Replace writes k to a temporary file (fsynced), overwrites the old key
// file's bytes with zeros (fsynced), renames the new file over it and
// syncs the directory. Overwriting in place does not erase the old bytes on
// every file system (copy-on-write, SSD remapping, backups); see the README.
func (s SealKeyFile) Replace(k SealKey) error {
	j := sealKeyJSON{Version: 1, Epoch: k.Epoch, Seed: base64.StdEncoding.EncodeToString(k.Private.Seed())}
	if k.Next != nil {
		j.Next = base64.StdEncoding.EncodeToString(k.Next.Seed())
	}
	b, _ := json.Marshal(j)
	defer clear(b)
	tmp := s.Path + ".tmp"
	if err := writeSynced(tmp, b); err != nil {
		return fmt.Errorf("audit: writing the sealing key: %w", err)
	}
	if f, err := os.OpenFile(s.Path, os.O_WRONLY, 0); err == nil {
		if st, err := f.Stat(); err == nil {
			_, _ = f.WriteAt(make([]byte, st.Size()), 0)
			_ = f.Sync()
		}
		f.Close()
	}
	if err := os.Rename(tmp, s.Path); err != nil {
		return fmt.Errorf("audit: replacing the sealing key: %w", err)
	}
	return syncDir(filepath.Dir(s.Path))
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LogSealed is the fields of a log_sealed event (TypeLogSealed), written by
// the Log only. Sig is the Ed25519 signature, by the private key of Epoch,
// of SealMessage(seq, prev, ts, fields); Next certifies the public key of
// epoch Epoch+1.
type LogSealed struct {
	Epoch uint64 `json:"epoch"`
	// Genesis and GenesisTS are the hash and timestamp of the log's first
	// event (seq 1).
	Genesis   string `json:"genesis"`
	GenesisTS string `json:"genesisTs"`
	// Next is the public key of the next epoch ("ed25519:" + 64 hex).
	Next string `json:"next"`
	// Reason is why the seal was written: "setup", "rekey", "schedule",
	// "stop".
	Reason string `json:"reason"`
	// Sig is "ed25519:" + 128 hex.
	Sig string `json:"sig"`
}

// Seal reasons.
const (
	SealSetup    = "setup"
	SealRekey    = "rekey"
	SealSchedule = "schedule"
	SealStop     = "stop"
)

const edPrefix = "ed25519:"

// SealMessage returns the bytes a seal's signature covers: the seal event's
// seq, prev (the hash-chain head it covers) and ts as stored, and its
// epoch, genesis, genesisTs, next and reason, one per line after a fixed
// first line.
func SealMessage(seq uint64, prev, ts string, s LogSealed) []byte {
	return []byte("portcullis audit seal v1\n" + strconv.FormatUint(seq, 10) + "\n" + prev + "\n" + ts + "\n" +
		strconv.FormatUint(s.Epoch, 10) + "\n" + s.Genesis + "\n" + s.GenesisTS + "\n" + s.Next + "\n" + s.Reason + "\n")
}

func formatPublic(pk ed25519.PublicKey) string { return edPrefix + hex.EncodeToString(pk) }

func parsePublic(s string) (ed25519.PublicKey, bool) {
	if !strings.HasPrefix(s, edPrefix) {
		return nil, false
	}
	b, err := hex.DecodeString(s[len(edPrefix):])
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, false
	}
	return ed25519.PublicKey(b), true
}

func parseEdSig(s string) ([]byte, bool) {
	if !strings.HasPrefix(s, edPrefix) {
		return nil, false
	}
	b, err := hex.DecodeString(s[len(edPrefix):])
	return b, err == nil && len(b) == ed25519.SignatureSize
}

// VerificationKey is what the person writes down: the public key of the
// first sealing epoch it proves (Epoch is 0 for a log's first keys, the
// re-keyed epoch after `setup-keys --force`).
type VerificationKey struct {
	Epoch  uint64
	Public ed25519.PublicKey
}

const vkPrefix = "PCVK1"

var vkEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// String formats the key as PCVK1-XXXX-XXXX-…: base32 (RFC 4648, no
// padding) of epoch (8 bytes, big-endian), public key (32 bytes) and the
// first 4 bytes of SHA-256 over "PCVK1" and those 40 bytes, in groups of
// four characters.
func (k VerificationKey) String() string {
	b := make([]byte, 0, 44)
	for i := 7; i >= 0; i-- {
		b = append(b, byte(k.Epoch>>(8*i)))
	}
	b = append(b, k.Public...)
	sum := sha256.Sum256(append([]byte(vkPrefix), b...))
	b = append(b, sum[:4]...)
	s := vkEncoding.EncodeToString(b)
	var out strings.Builder
	out.WriteString(vkPrefix)
	for i := 0; i < len(s); i += 4 {
		out.WriteByte('-')
		out.WriteString(s[i:min(i+4, len(s))])
	}
	return out.String()
}

// ParseVerificationKey reads a key as String writes it; case, spaces and
// dashes do not matter. A mistyped key fails its checksum.
func ParseVerificationKey(s string) (VerificationKey, error) {
	t := strings.ToUpper(strings.NewReplacer("-", "", " ", "", "\n", "", "\t", "").Replace(s))
	if !strings.HasPrefix(t, vkPrefix) {
		return VerificationKey{}, fmt.Errorf("audit: a verification key starts with %s-", vkPrefix)
	}
	b, err := vkEncoding.DecodeString(t[len(vkPrefix):])
	if err != nil || len(b) != 44 {
		return VerificationKey{}, fmt.Errorf("audit: %q is not a verification key (wrong length or characters)", s)
	}
	sum := sha256.Sum256(append([]byte(vkPrefix), b[:40]...))
	if string(sum[:4]) != string(b[40:]) {
		return VerificationKey{}, errors.New("audit: the verification key's checksum does not match: a character is mistyped")
	}
	var epoch uint64
	for _, c := range b[:8] {
		epoch = epoch<<8 | uint64(c)
	}
	return VerificationKey{Epoch: epoch, Public: ed25519.PublicKey(b[8:40])}, nil
}

// Anchor is what the daemon writes outside the audit directory after each
// seal (Options.AnchorPath): the last seal, so that a verifier can tell a
// log that ends before it. It is not signed by itself; the seal it names is.
type Anchor struct {
	Epoch uint64    `json:"epoch"`
	Seq   uint64    `json:"seq"`
	Hash  string    `json:"hash"`
	TS    time.Time `json:"ts"`
	File  string    `json:"file"`
}

// ReadAnchor reads an anchor file; ok is false when there is none.
func ReadAnchor(path string) (a Anchor, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return a, false, nil
	}
	if err != nil {
		return a, false, err
	}
	if err := json.Unmarshal(b, &a); err != nil || a.Hash == "" {
		return a, false, fmt.Errorf("audit: %s is not an audit anchor", path)
	}
	return a, true, nil
}

func writeAnchor(path string, a Anchor) error {
	b, _ := json.Marshal(a)
	tmp := path + ".tmp"
	if err := writeSynced(tmp, append(b, '\n')); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// newSealKey generates the key pair of epoch.
func newSealKey(epoch uint64) (SealKey, ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return SealKey{}, nil, fmt.Errorf("audit: generating a sealing key: %w", err)
	}
	return SealKey{Epoch: epoch, Private: priv}, pub, nil
}
