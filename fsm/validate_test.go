package fsm

import (
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestValidateKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
	tests := []struct {
		name string
		key  string
		msgs []string // nil: valid
	}{
		{"simple", "google-images", nil},
		{"structured", "provider:acme/cred:42", nil},
		{"one byte", "x", nil},
		{"max length", strings.Repeat("k", MaxKeyLen), nil},
		{"unicode", "café/日本/🚀", nil},
		{"empty", "", []string{`""`, "must not be empty"}},
		{"257 bytes", long, []string{`"kkkk`, "257 bytes", "longer than the maximum 256"}},
		{"space", "a b", []string{`"a b"`, "whitespace U+0020 at byte 1"}},
		{"tab", "a\tb", []string{`"a\tb"`, "whitespace U+0009"}},
		{"newline", "ab\n", []string{`"ab\n"`, "whitespace U+000A at byte 2"}},
		{"carriage return", "\rab", []string{"whitespace U+000D at byte 0"}},
		{"no-break space", "a\u00a0b", []string{"whitespace U+00A0"}},
		{"ideographic space", "a\u3000b", []string{"whitespace U+3000"}},
		{"line separator", "a\u2028b", []string{"whitespace U+2028"}},
		{"NUL", "a\x00b", []string{`"a\x00b"`, "control character U+0000 at byte 1"}},
		{"DEL", "a\x7fb", []string{"control character U+007F"}},
		{"C1 control", "a\u0085b", []string{"U+0085"}},
		{"escape", "\x1b[31m", []string{"control character U+001B"}},
		{"invalid UTF-8", "ab\xff", []string{`"ab\xff"`, "invalid UTF-8 at byte 2"}},
		{"truncated rune", "日本"[:4], []string{"invalid UTF-8 at byte 3"}},
		{"zero-width space", "a\u200bb", []string{"invisible formatting character U+200B"}},
		{"bidi override", "a\u202eb", []string{"invisible formatting character U+202E"}},
		{"byte order mark", "\ufeffab", []string{"invisible formatting character U+FEFF"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateKey(tt.key)
			if tt.msgs == nil {
				if err != nil {
					t.Fatalf("ValidateKey(%q) = %v, want nil", tt.key, err)
				}
				return
			}
			checkErr(t, err, []error{ErrInvalidKey}, append(tt.msgs, "fsm: invalid key")...)
			if errors.Is(err, ErrInvalidID) {
				t.Errorf("key error %q also wraps ErrInvalidID", err)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error is %d bytes long; the key should be truncated: %q", len(err.Error()), err)
			}
		})
	}
}

func TestValidateID(t *testing.T) {
	tests := []struct {
		name string
		id   string
		msgs []string
	}{
		{"simple", "node-1", nil},
		{"max length", strings.Repeat("n", MaxIDLen), nil},
		{"empty", "", []string{"must not be empty"}},
		{"129 bytes", strings.Repeat("n", MaxIDLen+1), []string{"129 bytes", "longer than the maximum 128"}},
		{"space", "node 1", []string{`"node 1"`, "whitespace"}},
		{"NUL", "n\x00", []string{"control character"}},
		{"invalid UTF-8", "\xc3", []string{"invalid UTF-8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateID(tt.id)
			if tt.msgs == nil {
				if err != nil {
					t.Fatalf("ValidateID(%q) = %v, want nil", tt.id, err)
				}
				return
			}
			checkErr(t, err, []error{ErrInvalidID}, append(tt.msgs, "fsm: invalid id")...)
		})
	}
}

func TestLimit_Validate(t *testing.T) {
	tests := []struct {
		name  string
		limit Limit
		msgs  []string // nil: valid
	}{
		{"typical", Limit{Rate: 10, Burst: 5}, nil},
		{"max", Limit{Rate: MaxRate, Burst: MaxBurst}, nil},
		{"tiny rate", Limit{Rate: math.SmallestNonzeroFloat64, Burst: 1}, nil},
		{"zero value", Limit{}, []string{"Rate 0: must be > 0", "Burst 0: must be >= 1"}},
		{"zero rate", Limit{Rate: 0, Burst: 1}, []string{"Rate 0: must be > 0"}},
		{"negative zero rate", Limit{Rate: math.Copysign(0, -1), Burst: 1}, []string{"must be > 0"}},
		{"negative rate", Limit{Rate: -1, Burst: 1}, []string{"Rate -1: must be > 0"}},
		{"NaN rate", Limit{Rate: math.NaN(), Burst: 1}, []string{"Rate NaN: must be finite"}},
		{"+Inf rate", Limit{Rate: math.Inf(1), Burst: 1}, []string{"Rate +Inf: must be finite"}},
		{"-Inf rate", Limit{Rate: math.Inf(-1), Burst: 1}, []string{"Rate -Inf: must be finite"}},
		{"rate above max", Limit{Rate: 1e9 + 1, Burst: 1}, []string{"Rate 1.000000001e+09: must be <= 1e+09 (MaxRate)"}},
		{"burst 0", Limit{Rate: 1, Burst: 0}, []string{"Burst 0: must be >= 1"}},
		{"negative burst", Limit{Rate: 1, Burst: -3}, []string{"Burst -3: must be >= 1"}},
		{"burst above max", Limit{Rate: 1, Burst: MaxBurst + 1}, []string{"Burst 1000001: must be <= 1000000 (MaxBurst)"}},
		{"both bad", Limit{Rate: math.NaN(), Burst: MaxBurst + 1}, []string{"Rate NaN", "Burst 1000001"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limit.Validate()
			if tt.msgs == nil {
				if err != nil {
					t.Fatalf("%+v.Validate() = %v, want nil", tt.limit, err)
				}
				return
			}
			checkErr(t, err, []error{ErrInvalidLimit}, tt.msgs...)
		})
	}
}

func TestMember_Validate(t *testing.T) {
	ok := Member{ID: "n1", Addr: "10.0.0.1:7000", Fraction: 0.25}
	with := func(f func(*Member)) Member { m := ok; f(&m); return m }
	tests := []struct {
		name   string
		member Member
		want   []error
		msgs   []string
	}{
		{"typical", ok, nil, nil},
		{"hostname", with(func(m *Member) { m.Addr = "node-1.example.com:443" }), nil, nil},
		{"ipv6", with(func(m *Member) { m.Addr = "[::1]:1" }), nil, nil},
		{"fraction 0", with(func(m *Member) { m.Fraction = 0 }), nil, nil},
		{"fraction 1", with(func(m *Member) { m.Fraction = 1 }), nil, nil},
		{"bad id", with(func(m *Member) { m.ID = "" }), []error{ErrInvalidID}, []string{"must not be empty"}},
		{"empty addr", with(func(m *Member) { m.Addr = "" }), []error{ErrInvalidMember}, []string{`Addr "": must not be empty`}},
		{"no port", with(func(m *Member) { m.Addr = "10.0.0.1" }), []error{ErrInvalidMember}, []string{"must be host:port"}},
		{"no host", with(func(m *Member) { m.Addr = ":7000" }), []error{ErrInvalidMember}, []string{"host must not be empty"}},
		{"port 0", with(func(m *Member) { m.Addr = "h:0" }), []error{ErrInvalidMember}, []string{`port "0"`}},
		{"port too big", with(func(m *Member) { m.Addr = "h:65536" }), []error{ErrInvalidMember}, []string{`port "65536"`}},
		{"port name", with(func(m *Member) { m.Addr = "h:http" }), []error{ErrInvalidMember}, []string{`port "http"`}},
		{"port leading zero", with(func(m *Member) { m.Addr = "h:080" }), []error{ErrInvalidMember}, []string{`port "080"`}},
		{"addr space", with(func(m *Member) { m.Addr = "h :1" }), []error{ErrInvalidMember}, []string{"whitespace"}},
		{"addr too long", with(func(m *Member) { m.Addr = strings.Repeat("h", MaxAddrLen) + ":1" }), []error{ErrInvalidMember}, []string{"longer than the maximum 256"}},
		{"negative fraction", with(func(m *Member) { m.Fraction = -0.1 }), []error{ErrInvalidMember}, []string{"Fraction -0.1: must be in [0, 1]"}},
		{"fraction above 1", with(func(m *Member) { m.Fraction = 1.5 }), []error{ErrInvalidMember}, []string{"Fraction 1.5"}},
		{"NaN fraction", with(func(m *Member) { m.Fraction = math.NaN() }), []error{ErrInvalidMember}, []string{"Fraction NaN"}},
		{"all bad", Member{Fraction: math.Inf(1)}, []error{ErrInvalidID, ErrInvalidMember}, []string{"id", "Addr", "Fraction +Inf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.member.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("%+v.Validate() = %v, want nil", tt.member, err)
				}
				return
			}
			checkErr(t, err, tt.want, tt.msgs...)
		})
	}
}

func TestLimit_Interval(t *testing.T) {
	tests := []struct {
		rate float64
		want time.Duration
	}{
		{1, time.Second},
		{3, 333333334}, // 1/3 s rounded up
		{7, 142857143}, // 142857142.857...
		{10, 100 * time.Millisecond},
		{0.5, 2 * time.Second},
		{0.1, 10 * time.Second}, // float64(0.1) is a hair above 0.1
		{1.0 / 3, 3000000001},   // float64(1/3) is a hair below 1/3: 3s would be too fast
		{1e6, time.Microsecond},
		{3e8, 4},
		{999_999_999, 2},
		{MaxRate, 1},
		{math.SmallestNonzeroFloat64, math.MaxInt64}, // saturates
		{1e-10, math.MaxInt64},                       // 1e19 ns does not fit
		// Invalid limits: conservative answers, never a panic.
		{0, math.MaxInt64},
		{-5, math.MaxInt64},
		{math.NaN(), math.MaxInt64},
		{2e9, 1},
		{math.Inf(1), 1},
	}
	for _, tt := range tests {
		if got := (Limit{Rate: tt.rate, Burst: 1}).Interval(); got != tt.want {
			t.Errorf("Limit{Rate: %v}.Interval() = %d, want %d", tt.rate, got, tt.want)
		}
	}
}

// TestLimit_IntervalExact checks Interval against exact rational arithmetic:
// n*Rate >= 1e9 and (n-1)*Rate < 1e9, over rates of every magnitude.
func TestLimit_IntervalExact(t *testing.T) {
	rng := newRand(1)
	billion := new(big.Rat).SetInt64(1e9)
	for i := range 20000 {
		var r float64
		switch i % 4 {
		case 0:
			r = randRate(rng)
		case 1: // exact quotients and their float neighbours
			r = 1e9 / float64(1+rng.Int64N(1<<40))
			r = math.Nextafter(r, r*float64(rng.IntN(3)))
		case 2:
			r = float64(1+rng.IntN(1e6)) / float64(1+rng.IntN(1e6))
		default:
			r = math.Pow(10, -12+21*rng.Float64())
		}
		if !(r > 0) || r > MaxRate {
			continue
		}
		n := Limit{Rate: r, Burst: 1}.Interval()
		if n < 1 {
			t.Fatalf("Interval(%v) = %d < 1", r, n)
		}
		rat := new(big.Rat).SetFloat64(r)
		prod := new(big.Rat).Mul(rat, new(big.Rat).SetInt64(int64(n)))
		if n != math.MaxInt64 && prod.Cmp(billion) < 0 {
			t.Fatalf("Interval(%v) = %d: %d*rate < 1e9, pace would exceed the rate", r, n, n)
		}
		if n > 1 {
			prev := new(big.Rat).Mul(rat, new(big.Rat).SetInt64(int64(n-1)))
			if prev.Cmp(billion) >= 0 {
				t.Fatalf("Interval(%v) = %d: %d would do, rounded up too far", r, n, n-1)
			}
		}
	}
}
