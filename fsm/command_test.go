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
		{DeleteLimit{Key: "ab"}, "0102" + "026162"},
		// count 2; "a" 1ns (zigzag 2); "b" 1s = 1e9 ns (zigzag 2e9)
		{ExtendHorizons{Entries: []HorizonEntry{{Key: "a", Ahead: 1}, {Key: "b", Ahead: time.Second}}},
			"0103" + "02" + "016102" + "0162" + hex.EncodeToString(binary.AppendVarint(nil, 1e9))},
		{UpsertMember{Member: Member{ID: "n", Addr: "h:1", Fraction: 0.5}}, "0104" + "016e" + "03683a31" + "3fe0000000000000"},
		{RemoveMember{ID: "n"}, "0105" + "016e"},
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
		{"zero ahead", ExtendHorizons{Entries: []HorizonEntry{{Key: "k", Ahead: 0}}}, []error{ErrInvalidCommand}, []string{`entry 0 key "k": Ahead 0s: must be > 0 and <= 1h0m0s`}},
		{"negative ahead", ExtendHorizons{Entries: []HorizonEntry{{Key: "k", Ahead: -1}}}, []error{ErrInvalidCommand}, []string{"Ahead -1ns"}},
		{"ahead above max", ExtendHorizons{Entries: []HorizonEntry{{Key: "k", Ahead: MaxHorizonAhead + 1}}}, []error{ErrInvalidCommand}, []string{"Ahead 1h0m0.000000001s"}},
		{"bad entry key", ExtendHorizons{Entries: []HorizonEntry{{Key: "ok", Ahead: 1}, {Key: "", Ahead: 1}}}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"entry 1"}},
		{"duplicate keys", ExtendHorizons{Entries: []HorizonEntry{{Key: "a", Ahead: 1}, {Key: "b", Ahead: 1}, {Key: "a", Ahead: 2}}}, []error{ErrInvalidCommand}, []string{`entries 0 and 2: duplicate key "a"`}},
		{"duplicate keys, large batch", ExtendHorizons{Entries: append(append([]HorizonEntry{}, many[:100]...), many[5])}, []error{ErrInvalidCommand}, []string{"entries 5 and 100: duplicate key"}},
		{"bad member", UpsertMember{Member: Member{ID: "n", Addr: "nope", Fraction: 2}}, []error{ErrInvalidCommand, ErrInvalidMember}, []string{"UpsertMember", "Addr", "Fraction 2"}},
		{"bad remove id", RemoveMember{ID: strings.Repeat("n", MaxIDLen+1)}, []error{ErrInvalidCommand, ErrInvalidID}, []string{"RemoveMember", "129 bytes"}},
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
		{"non-minimal length", []byte{1, 2, 0x81, 0x00, 'k'}, []error{ErrInvalidCommand}, []string{"non-minimal varint"}},
		{"varint overflow", cat([]byte{1, 2}, bytes.Repeat([]byte{0xff}, 11)), []error{ErrInvalidCommand}, []string{"overflows 64 bits"}},
		{"key longer than max", cat([]byte{1, 2}, binary.AppendUvarint(nil, MaxKeyLen+1), bytes.Repeat([]byte{'k'}, MaxKeyLen+1)), []error{ErrInvalidCommand}, []string{"length 257 exceeds the maximum 256"}},
		{"length beyond input", []byte{1, 2, 5, 'k'}, []error{ErrInvalidCommand}, []string{"length 5 exceeds the 1 bytes remaining"}},
		{"huge length", cat([]byte{1, 2}, binary.AppendUvarint(nil, math.MaxUint64)), []error{ErrInvalidCommand}, []string{"exceeds the maximum"}},
		{"entry count above max", cat([]byte{1, 3}, binary.AppendUvarint(nil, MaxHorizonEntries+1)), []error{ErrInvalidCommand}, []string{"Entries count 65537", "maximum 65536"}},
		{"entry count beyond input", []byte{1, 3, 100, 1, 'k', 2}, []error{ErrInvalidCommand}, []string{"Entries count 100", "only 3 remain"}},
		{"entry count 0", []byte{1, 3, 0}, []error{ErrInvalidCommand}, []string{"0 entries"}},
		{"duplicate entry keys", []byte{1, 3, 2, 1, 'k', 2, 1, 'k', 4}, []error{ErrInvalidCommand}, []string{"duplicate key"}},
		{"zero ahead", []byte{1, 3, 1, 1, 'k', 0}, []error{ErrInvalidCommand}, []string{"Ahead 0s"}},
		{"key with space", []byte{1, 2, 3, 'a', ' ', 'b'}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"whitespace"}},
		{"key invalid UTF-8", []byte{1, 2, 1, 0xff}, []error{ErrInvalidCommand, ErrInvalidKey}, []string{"invalid UTF-8"}},
		{"NaN rate", cat([]byte{1, 1, 1, 'k'}, f64(math.NaN()), []byte{2}), []error{ErrInvalidCommand, ErrInvalidLimit}, []string{"Rate NaN"}},
		{"burst 0", cat([]byte{1, 1, 1, 'k'}, f64(1), []byte{0}), []error{ErrInvalidCommand, ErrInvalidLimit}, []string{"Burst 0"}},
		{"burst huge", cat([]byte{1, 1, 1, 'k'}, f64(1), binary.AppendVarint(nil, math.MaxInt64)), []error{ErrInvalidCommand}, []string{"Burst"}},
		{"truncated float", []byte{1, 1, 1, 'k', 0x3f, 0xf0}, []error{ErrInvalidCommand}, []string{"Rate: need 8 bytes"}},
		{"member bad fraction", cat([]byte{1, 4, 1, 'n', 3, 'h', ':', '1'}, f64(-1)), []error{ErrInvalidCommand, ErrInvalidMember}, []string{"Fraction -1"}},
		{"remove empty id", []byte{1, 5, 0}, []error{ErrInvalidCommand, ErrInvalidID}, []string{"must not be empty"}},
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
