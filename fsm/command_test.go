package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// validCommands has one valid command of every type (and an edge or two).
func validCommands() []Command {
	return []Command{
		SetLimit{Key: "google-images", Limit: Limit{Rate: 10, Burst: 5}},
		SetLimit{Key: "provider:acme/cred:42", Limit: Limit{Rate: 0.5, Burst: 1}},
		DeleteLimit{Key: "google-images"},
		ExtendHorizons{Entries: []HorizonEntry{{Key: "google-images", Ahead: 2 * time.Second}}},
		ExtendHorizons{Entries: []HorizonEntry{
			{Key: "a", Ahead: 1},
			{Key: "b", Ahead: MaxHorizonAhead},
			{Key: "日本", Ahead: 1500 * time.Millisecond},
		}},
		UpsertMember{Member: Member{ID: "node-1", Addr: "10.0.0.1:7000", Fraction: 1.0 / 3}},
		RemoveMember{ID: "node-1"},
		SetPause{Key: "google-images", For: 90 * time.Second},
		SetPause{Key: "google-images", For: 0},
		SetCap{Key: "google-images", Max: 8},
		DeleteCap{Key: "google-images"},
		AcquireSlots{ID: "node-1/42", Holder: "node-1", Keys: []string{"google-images"}, TTL: 30 * time.Second},
		AcquireSlots{ID: "node-2/7", Holder: "node-2", Keys: []string{"provider:acme/cred:42", "provider:acme", "日本"}, TTL: MaxSlotTTL},
		ReleaseSlots{IDs: []string{"node-1/42"}},
		ReleaseSlots{IDs: []string{"node-2/7", "node-1/42", "never-held"}},
	}
}

// TestEncode_Golden pins the layout documented in doc.go.
func TestEncode_Golden(t *testing.T) {
	tests := []struct {
		cmd  Command
		want string // hex
	}{
		// version 1, type 1, len 2 "ab", 1.0 as f64, burst 2 zigzag = 4
		{SetLimit{Key: "ab", Limit: Limit{Rate: 1, Burst: 2}}, "0101" + "026162" + "3ff0000000000000" + "04"},
		// in dry run: type 11, so an enforced limit encodes as before
		{SetLimit{Key: "ab", Limit: Limit{Rate: 1, Burst: 2, DryRun: true}}, "010b" + "026162" + "3ff0000000000000" + "04"},
		{DeleteLimit{Key: "ab"}, "0102" + "026162"},
		// count 2; "a" 1ns (zigzag 2); "b" 1s = 1e9 ns (zigzag 2e9)
		{ExtendHorizons{Entries: []HorizonEntry{{Key: "a", Ahead: 1}, {Key: "b", Ahead: time.Second}}},
			"0103" + "02" + "016102" + "0162" + hex.EncodeToString(binary.AppendVarint(nil, 1e9))},
		{UpsertMember{Member: Member{ID: "n", Addr: "h:1", Fraction: 0.5}}, "0104" + "016e" + "03683a31" + "3fe0000000000000"},
		{RemoveMember{ID: "n"}, "0105" + "016e"},
		// 1s = 1e9 ns as a zigzag varint
		{SetPause{Key: "ab", For: time.Second}, "0106" + "026162" + hex.EncodeToString(binary.AppendVarint(nil, 1e9))},
		{SetPause{Key: "ab", For: 0}, "0106" + "026162" + "00"},
		// Max 3 zigzag = 6
		{SetCap{Key: "ab", Max: 3}, "0107" + "026162" + "06"},
		{DeleteCap{Key: "ab"}, "0108" + "026162"},
		// ID "s", Holder "n", 2 keys "a" "b", TTL 1ns (zigzag 2)
		{AcquireSlots{ID: "s", Holder: "n", Keys: []string{"a", "b"}, TTL: 1}, "0109" + "0173" + "016e" + "02" + "0161" + "0162" + "02"},
		// count 2, "s", "t"
		{ReleaseSlots{IDs: []string{"s", "t"}}, "010a" + "02" + "0173" + "0174"},
	}
	for _, tt := range tests {
		got := mustEncode(t, tt.cmd)
		if hex.EncodeToString(got) != tt.want {
			t.Errorf("Encode(%#v) = %x, want %s", tt.cmd, got, tt.want)
		}
	}
}

func TestEncode_RoundTrip(t *testing.T) {
	for _, c := range validCommands() {
		checkRoundTrip(t, c)
	}
	rng := newRand(2)
	var pool []string
	for i := range 10000 {
		if i%100 == 0 {
			pool = []string{randKey(rng), randKey(rng), randKey(rng)}
		}
		checkRoundTrip(t, randCommand(rng, pool))
	}
}

func checkRoundTrip(t *testing.T, c Command) {
	t.Helper()
	b := mustEncode(t, c)
	got, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode(Encode(%#v)): %v", c, err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("Decode(Encode(c)) = %#v, want %#v", got, c)
	}
	if b2 := mustEncode(t, got); !bytes.Equal(b, b2) {
		t.Fatalf("re-encoding differs:\n %x\n %x", b, b2)
	}
}

func TestEncode_Pointer(t *testing.T) {
	for _, c := range validCommands() {
		var p Command
		switch v := c.(type) {
		case SetLimit:
			p = &v
		case DeleteLimit:
			p = &v
		case ExtendHorizons:
			p = &v
		case UpsertMember:
			p = &v
		case RemoveMember:
			p = &v
		case SetPause:
			p = &v
		case SetCap:
			p = &v
		case DeleteCap:
			p = &v
		case AcquireSlots:
			p = &v
		case ReleaseSlots:
			p = &v
		default:
			t.Fatalf("no pointer case for %T", c)
		}
		if a, b := mustEncode(t, c), mustEncode(t, p); !bytes.Equal(a, b) {
			t.Errorf("Encode(%T) = %x, Encode(value) = %x", p, b, a)
		}
	}
}

func TestEncode_Invalid(t *testing.T) {
	many := make([]HorizonEntry, MaxHorizonEntries+1)
	for i := range many {
		many[i] = HorizonEntry{Key: "k" + strconv.Itoa(i), Ahead: 1}
	}
	manyKeys := make([]string, MaxSlotKeys+1)
	for i := range manyKeys {
		manyKeys[i] = "k" + strconv.Itoa(i)
	}
	manyIDs := make([]string, MaxReleaseIDs+1)
	for i := range manyIDs {
		manyIDs[i] = "s" + strconv.Itoa(i)
	}
	slot := func(id, holder string, keys []string, ttl time.Duration) AcquireSlots {
		return AcquireSlots{ID: id, Holder: holder, Keys: keys, TTL: ttl}
	}
	ks := func(keys ...string) []string { return keys }
	tests := []struct {
		name string
		cmd  Command
		want []error
		msgs []string
	}{
		{"nil", nil, []error{ErrInvalidCommand}, []string{"nil command"}},
		{"nil pointer", (*SetLimit)(nil), []error{ErrInvalidCommand}, []string{"nil *fsm.SetLimit"}},
		{"empty key", SetLimit{Limit: Limit{Rate: 1, Burst: 1}}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"SetLimit", "must not be empty"}},
		{"bad limit", SetLimit{Key: "k", Limit: Limit{Rate: math.NaN(), Burst: 0}}, []error{ErrInvalidCommand, ErrInvalidLimit}, []string{"Rate NaN", "Burst 0"}},
		{"bad delete key", DeleteLimit{Key: "a b"}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"DeleteLimit", "whitespace"}},
		{"no entries", ExtendHorizons{}, []error{ErrInvalidCommand}, []string{"0 entries: must be 1..65536"}},
		{"too many entries", ExtendHorizons{Entries: many}, []error{ErrInvalidCommand}, []string{"65537 entries"}},
		{"negative ahead", ExtendHorizons{Entries: []HorizonEntry{{Key: "k", Ahead: -1}}}, []error{ErrInvalidCommand}, []string{`entry 0 key "k": Ahead -1ns: must be >= 0 and <= 1h0m0s`}},
		{"ahead above max", ExtendHorizons{Entries: []HorizonEntry{{Key: "k", Ahead: MaxHorizonAhead + 1}}}, []error{ErrInvalidCommand}, []string{"Ahead 1h0m0.000000001s"}},
		{"bad entry key", ExtendHorizons{Entries: []HorizonEntry{{Key: "ok", Ahead: 1}, {Key: "", Ahead: 1}}}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"entry 1"}},
		{"duplicate keys", ExtendHorizons{Entries: []HorizonEntry{{Key: "a", Ahead: 1}, {Key: "b", Ahead: 1}, {Key: "a", Ahead: 2}}}, []error{ErrInvalidCommand}, []string{`entries 0 and 2: duplicate key "a"`}},
		{"duplicate keys, large batch", ExtendHorizons{Entries: append(append([]HorizonEntry{}, many[:100]...), many[5])}, []error{ErrInvalidCommand}, []string{"entries 5 and 100: duplicate key"}},
		{"bad member", UpsertMember{Member: Member{ID: "n", Addr: "nope", Fraction: 2}}, []error{ErrInvalidCommand, ErrInvalidMember}, []string{"UpsertMember", "Addr", "Fraction 2"}},
		{"bad remove id", RemoveMember{ID: strings.Repeat("n", MaxIDLen+1)}, []error{ErrInvalidCommand, ErrInvalidID}, []string{"RemoveMember", "129 bytes"}},
		{"nil pointer SetPause", (*SetPause)(nil), []error{ErrInvalidCommand}, []string{"nil *fsm.SetPause"}},
		{"nil pointer ReleaseSlots", (*ReleaseSlots)(nil), []error{ErrInvalidCommand}, []string{"nil *fsm.ReleaseSlots"}},
		{"pause bad key", SetPause{Key: "", For: time.Second}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"SetPause", "must not be empty"}},
		{"pause negative", SetPause{Key: "k", For: -1}, []error{ErrInvalidCommand}, []string{"SetPause", "For -1ns: must be >= 0 and <= 24h0m0s (MaxPause)"}},
		{"pause above max", SetPause{Key: "k", For: MaxPause + 1}, []error{ErrInvalidCommand}, []string{"For 24h0m0.000000001s"}},
		{"pause bad key and for", SetPause{Key: "a b", For: -1}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"whitespace", "For -1ns"}},
		{"cap bad key", SetCap{Key: "a\nb", Max: 1}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"SetCap", "whitespace"}},
		{"cap zero", SetCap{Key: "k", Max: 0}, []error{ErrInvalidCommand}, []string{"SetCap", "Max 0: must be >= 1"}},
		{"cap negative", SetCap{Key: "k", Max: -5}, []error{ErrInvalidCommand}, []string{"Max -5: must be >= 1"}},
		{"cap above max", SetCap{Key: "k", Max: MaxCap + 1}, []error{ErrInvalidCommand}, []string{"Max 1000001: must be <= 1000000 (MaxCap)"}},
		{"delete cap bad key", DeleteCap{Key: strings.Repeat("k", MaxKeyLen+1)}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"DeleteCap", "257 bytes"}},
		{"acquire empty id", slot("", "n", ks("k"), 1), []error{ErrInvalidCommand, ErrInvalidID}, []string{"AcquireSlots", `ID: invalid id "": must not be empty`}},
		{"acquire bad holder", slot("s", "n 1", ks("k"), 1), []error{ErrInvalidCommand, ErrInvalidID}, []string{`Holder: invalid id "n 1": contains whitespace`}},
		{"acquire long holder", slot("s", strings.Repeat("n", MaxIDLen+1), ks("k"), 1), []error{ErrInvalidCommand, ErrInvalidID}, []string{"Holder", "129 bytes"}},
		{"acquire no keys", slot("s", "n", nil, 1), []error{ErrInvalidCommand}, []string{"0 keys: must be 1..16 (MaxSlotKeys)"}},
		{"acquire too many keys", slot("s", "n", manyKeys, 1), []error{ErrInvalidCommand}, []string{"17 keys: must be 1..16"}},
		{"acquire bad key", slot("s", "n", ks("ok", "\u200bzw"), 1), []error{ErrInvalidCommand, ErrInvalidKey}, []string{"key 1: invalid key", "invisible formatting"}},
		{"acquire duplicate keys", slot("s", "n", ks("a", "b", "c", "b"), 1), []error{ErrInvalidCommand}, []string{`keys 1 and 3: duplicate key "b"`}},
		{"acquire zero ttl", slot("s", "n", ks("k"), 0), []error{ErrInvalidCommand}, []string{"TTL 0s: must be > 0 and <= 1h0m0s (MaxSlotTTL)"}},
		{"acquire negative ttl", slot("s", "n", ks("k"), -time.Second), []error{ErrInvalidCommand}, []string{"TTL -1s"}},
		{"acquire ttl above max", slot("s", "n", ks("k"), MaxSlotTTL+1), []error{ErrInvalidCommand}, []string{"TTL 1h0m0.000000001s"}},
		{"acquire everything wrong", slot("", "", nil, 0), []error{ErrInvalidCommand, ErrInvalidID}, []string{"ID:", "Holder:", "0 keys", "TTL 0s"}},
		{"release no ids", ReleaseSlots{}, []error{ErrInvalidCommand}, []string{"ReleaseSlots", "0 ids: must be 1..4096 (MaxReleaseIDs)"}},
		{"release too many ids", ReleaseSlots{IDs: manyIDs}, []error{ErrInvalidCommand}, []string{"4097 ids"}},
		{"release bad id", ReleaseSlots{IDs: ks("s", "")}, []error{ErrInvalidCommand, ErrInvalidID}, []string{`id 1: invalid id "": must not be empty`}},
		{"release duplicate ids", ReleaseSlots{IDs: ks("s", "t", "s")}, []error{ErrInvalidCommand}, []string{`ids 0 and 2: duplicate id "s"`}},
		{"release duplicate ids, large batch", ReleaseSlots{IDs: append(append([]string{}, manyIDs[:100]...), manyIDs[7])}, []error{ErrInvalidCommand}, []string{"ids 7 and 100: duplicate id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Encode(tt.cmd)
			if b != nil {
				t.Errorf("Encode returned %d bytes with an error", len(b))
			}
			checkErr(t, err, tt.want, append(tt.msgs, "fsm: encode")...)
		})
	}
}

func TestDecode_Invalid(t *testing.T) {
	valid := mustEncode(t, SetLimit{Key: "k", Limit: Limit{Rate: 1, Burst: 1}})
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	f64 := func(f float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(f)) }
	tests := []struct {
		name string
		b    []byte
		want []error
		msgs []string
	}{
		{"nil", nil, []error{ErrInvalidCommand}, []string{"0 bytes, need at least 2"}},
		{"version only", []byte{1}, []error{ErrInvalidCommand}, []string{"1 bytes"}},
		{"version 0", cat([]byte{0}, valid[1:]), []error{ErrInvalidCommand}, []string{"codec version 0"}},
		{"version 2", cat([]byte{2}, valid[1:]), []error{ErrInvalidCommand}, []string{"codec version 2: this build reads version 1"}},
		{"type 0", []byte{1, 0}, []error{ErrUnknownCommand}, []string{"unknown command type: 0"}},
		{"type 200", []byte{1, 200, 1, 2, 3}, []error{ErrUnknownCommand}, []string{"200"}},
		{"trailing byte", cat(valid, []byte{0}), []error{ErrInvalidCommand}, []string{"1 trailing bytes"}},
		{"dry run trailing byte", cat([]byte{1, 11}, valid[2:], []byte{1}), []error{ErrInvalidCommand}, []string{"SetLimit: 1 trailing bytes"}},
		{"non-minimal length", []byte{1, 2, 0x81, 0x00, 'k'}, []error{ErrInvalidCommand}, []string{"non-minimal varint"}},
		{"varint overflow", cat([]byte{1, 2}, bytes.Repeat([]byte{0xff}, 11)), []error{ErrInvalidCommand}, []string{"overflows 64 bits"}},
		{"key longer than max", cat([]byte{1, 2}, binary.AppendUvarint(nil, MaxKeyLen+1), bytes.Repeat([]byte{'k'}, MaxKeyLen+1)), []error{ErrInvalidCommand}, []string{"length 257 exceeds the maximum 256"}},
		{"length beyond input", []byte{1, 2, 5, 'k'}, []error{ErrInvalidCommand}, []string{"length 5 exceeds the 1 bytes remaining"}},
		{"huge length", cat([]byte{1, 2}, binary.AppendUvarint(nil, math.MaxUint64)), []error{ErrInvalidCommand}, []string{"exceeds the maximum"}},
		{"entry count above max", cat([]byte{1, 3}, binary.AppendUvarint(nil, MaxHorizonEntries+1)), []error{ErrInvalidCommand}, []string{"Entries count 65537", "maximum 65536"}},
		{"entry count beyond input", []byte{1, 3, 100, 1, 'k', 2}, []error{ErrInvalidCommand}, []string{"Entries count 100", "only 3 remain"}},
		{"entry count 0", []byte{1, 3, 0}, []error{ErrInvalidCommand}, []string{"0 entries"}},
		{"duplicate entry keys", []byte{1, 3, 2, 1, 'k', 2, 1, 'k', 4}, []error{ErrInvalidCommand}, []string{"duplicate key"}},
		{"negative ahead", []byte{1, 3, 1, 1, 'k', 1}, []error{ErrInvalidCommand}, []string{"Ahead -1ns"}},
		{"key with space", []byte{1, 2, 3, 'a', ' ', 'b'}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"whitespace"}},
		{"key invalid UTF-8", []byte{1, 2, 1, 0xff}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"invalid UTF-8"}},
		{"NaN rate", cat([]byte{1, 1, 1, 'k'}, f64(math.NaN()), []byte{2}), []error{ErrInvalidCommand, ErrInvalidLimit}, []string{"Rate NaN"}},
		{"burst 0", cat([]byte{1, 1, 1, 'k'}, f64(1), []byte{0}), []error{ErrInvalidCommand, ErrInvalidLimit}, []string{"Burst 0"}},
		{"burst huge", cat([]byte{1, 1, 1, 'k'}, f64(1), binary.AppendVarint(nil, math.MaxInt64)), []error{ErrInvalidCommand}, []string{"Burst"}},
		{"truncated float", []byte{1, 1, 1, 'k', 0x3f, 0xf0}, []error{ErrInvalidCommand}, []string{"Rate: need 8 bytes"}},
		{"member bad fraction", cat([]byte{1, 4, 1, 'n', 3, 'h', ':', '1'}, f64(-1)), []error{ErrInvalidCommand, ErrInvalidMember}, []string{"Fraction -1"}},
		{"remove empty id", []byte{1, 5, 0}, []error{ErrInvalidCommand, ErrInvalidID}, []string{"must not be empty"}},
		{"type 14", []byte{1, 14, 1, 'k'}, []error{ErrUnknownCommand}, []string{"unknown command type: 14"}},
		{"pause negative", []byte{1, 6, 1, 'k', 1}, []error{ErrInvalidCommand}, []string{"SetPause", "For -1ns"}},
		{"pause above max", cat([]byte{1, 6, 1, 'k'}, binary.AppendVarint(nil, int64(MaxPause+1))), []error{ErrInvalidCommand}, []string{"MaxPause"}},
		{"pause missing for", []byte{1, 6, 1, 'k'}, []error{ErrInvalidCommand}, []string{"For: truncated varint"}},
		{"pause trailing", []byte{1, 6, 1, 'k', 2, 0}, []error{ErrInvalidCommand}, []string{"SetPause: 1 trailing bytes"}},
		{"pause non-minimal for", []byte{1, 6, 1, 'k', 0x82, 0x00}, []error{ErrInvalidCommand}, []string{"For: non-minimal varint"}},
		{"cap zero", []byte{1, 7, 1, 'k', 0}, []error{ErrInvalidCommand}, []string{"SetCap", "Max 0"}},
		{"cap huge", cat([]byte{1, 7, 1, 'k'}, binary.AppendVarint(nil, math.MaxInt64)), []error{ErrInvalidCommand}, []string{"Max"}},
		{"cap missing max", []byte{1, 7, 1, 'k'}, []error{ErrInvalidCommand}, []string{"Max: truncated varint"}},
		{"delete cap empty key", []byte{1, 8, 0}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"DeleteCap", "must not be empty"}},
		{"delete cap trailing", []byte{1, 8, 1, 'k', 'k'}, []error{ErrInvalidCommand}, []string{"1 trailing bytes"}},
		{"acquire key count above max", []byte{1, 9, 1, 's', 1, 'n', MaxSlotKeys + 1}, []error{ErrInvalidCommand}, []string{"AcquireSlots", "Keys count 17", "maximum 16"}},
		{"acquire key count beyond input", []byte{1, 9, 1, 's', 1, 'n', 5, 1, 'a', 2}, []error{ErrInvalidCommand}, []string{"Keys count 5", "only 3 remain"}},
		{"acquire key count 0", []byte{1, 9, 1, 's', 1, 'n', 0, 2}, []error{ErrInvalidCommand}, []string{"0 keys"}},
		{"acquire duplicate keys", []byte{1, 9, 1, 's', 1, 'n', 2, 1, 'a', 1, 'a', 2}, []error{ErrInvalidCommand}, []string{`keys 0 and 1: duplicate key "a"`}},
		{"acquire zero ttl", []byte{1, 9, 1, 's', 1, 'n', 1, 1, 'a', 0}, []error{ErrInvalidCommand}, []string{"TTL 0s"}},
		{"acquire missing ttl", []byte{1, 9, 1, 's', 1, 'n', 1, 1, 'a'}, []error{ErrInvalidCommand}, []string{"TTL: truncated varint"}},
		{"acquire empty holder", []byte{1, 9, 1, 's', 0, 1, 1, 'a', 2}, []error{ErrInvalidCommand, ErrInvalidID}, []string{"Holder:"}},
		{"acquire holder longer than max", cat([]byte{1, 9, 1, 's'}, binary.AppendUvarint(nil, MaxIDLen+1), bytes.Repeat([]byte{'n'}, MaxIDLen+1)), []error{ErrInvalidCommand}, []string{"Holder at offset 4: length 129 exceeds the maximum 128"}},
		{"acquire trailing", []byte{1, 9, 1, 's', 1, 'n', 1, 1, 'a', 2, 0}, []error{ErrInvalidCommand}, []string{"AcquireSlots: 1 trailing bytes"}},
		{"release id count above max", cat([]byte{1, 10}, binary.AppendUvarint(nil, MaxReleaseIDs+1)), []error{ErrInvalidCommand}, []string{"ReleaseSlots", "IDs count 4097", "maximum 4096"}},
		{"release huge id count", cat([]byte{1, 10}, binary.AppendUvarint(nil, math.MaxUint64)), []error{ErrInvalidCommand}, []string{"IDs count", "exceeds the maximum"}},
		{"release id count beyond input", []byte{1, 10, 3, 1, 's'}, []error{ErrInvalidCommand}, []string{"IDs count 3", "only 2 remain"}},
		{"release id count 0", []byte{1, 10, 0}, []error{ErrInvalidCommand}, []string{"0 ids"}},
		{"release duplicate ids", []byte{1, 10, 2, 1, 's', 1, 's'}, []error{ErrInvalidCommand}, []string{`ids 0 and 1: duplicate id "s"`}},
		{"release id with space", []byte{1, 10, 1, 3, 's', ' ', 't'}, []error{ErrInvalidCommand, ErrInvalidID}, []string{"id 0", "whitespace"}},
		{"release trailing", []byte{1, 10, 1, 1, 's', 9}, []error{ErrInvalidCommand}, []string{"ReleaseSlots: 1 trailing bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Decode(tt.b)
			if c != nil {
				t.Errorf("Decode returned %#v with an error", c)
			}
			checkErr(t, err, tt.want, append(tt.msgs, "fsm: decode")...)
		})
	}
}

// TestDecode_Prefixes checks that every strict prefix of a valid encoding
// fails cleanly.
func TestDecode_Prefixes(t *testing.T) {
	cmds := validCommands()
	rng := newRand(3)
	for range 300 {
		cmds = append(cmds, randCommand(rng, nil))
	}
	for _, c := range cmds {
		b := mustEncode(t, c)
		for n := range len(b) {
			// Long encodings: every prefix near the start and the end, a
			// sample in between (each Decode is linear in the input).
			if n > 512 && n < len(b)-512 && n%97 != 0 {
				continue
			}
			got, err := Decode(b[:n])
			if err == nil {
				t.Fatalf("Decode(%x), a %d-byte prefix of %x = %#v, want an error", b[:n], n, b, got)
			}
			if !errors.Is(err, ErrInvalidCommand) {
				t.Fatalf("Decode(prefix %d of %x) = %v, want ErrInvalidCommand", n, b, err)
			}
		}
	}
}
