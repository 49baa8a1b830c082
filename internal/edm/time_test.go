package edm

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestFormatTimestamp(t *testing.T) {
	tests := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2021, 8, 31, 15, 42, 5, 838226300, time.UTC), "2021-08-31T15:42:05.8382263Z"},
		// service answers: "2020-08-25T16:35:09.461291Z", "2020-01-01T01:02:00Z"
		{time.Date(2020, 8, 25, 16, 35, 9, 461291000, time.UTC), "2020-08-25T16:35:09.461291Z"},
		{time.Date(2020, 1, 1, 1, 2, 0, 0, time.UTC), "2020-01-01T01:02:00Z"},
		{time.Date(2020, 1, 1, 1, 2, 0, 100, time.UTC), "2020-01-01T01:02:00.0000001Z"},
		{time.Date(2020, 1, 1, 1, 2, 0, 99, time.UTC), "2020-01-01T01:02:00Z"}, // below a tick
		{time.Date(2020, 1, 1, 1, 2, 0, 500000000, time.UTC), "2020-01-01T01:02:00.5Z"},
		{time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC), "1601-01-01T00:00:00Z"},
		{time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), "9999-12-31T23:59:59.9999999Z"},
		{time.Date(2020, 1, 1, 1, 0, 0, 0, time.FixedZone("+2", 7200)), "2019-12-31T23:00:00Z"},
		{time.Date(33, 1, 1, 0, 0, 0, 0, time.UTC), "0033-01-01T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := FormatTimestamp(tt.in); got != tt.want {
				t.Fatalf("FormatTimestamp = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestETag(t *testing.T) {
	ts := time.Date(2021, 8, 31, 15, 42, 5, 838226300, time.UTC)
	const want = `W/"datetime'2021-08-31T15%3A42%3A05.8382263Z'"`
	if got := FormatETag(ts); got != want {
		t.Fatalf("FormatETag = %q, want %q", got, want)
	}
	if got := FormatETag(time.Date(2022, 1, 2, 3, 4, 5, 120000000, time.UTC)); got != `W/"datetime'2022-01-02T03%3A04%3A05.12Z'"` {
		t.Errorf("trailing zeros kept: %q", got)
	}

	accepted := []string{
		want,
		`"datetime'2021-08-31T15%3A42%3A05.8382263Z'"`,
		`W/"datetime'2021-08-31T15:42:05.8382263Z'"`,
		`W/"datetime'2021-08-31T15%3a42%3a05.8382263Z'"`,
		`w/"DateTime'2021-08-31T15%3A42%3A05.8382263Z'"`,
		`datetime'2021-08-31T15%3A42%3A05.8382263Z'`,
		`W/"datetime'2021-08-31T15%3A42%3A05.838226300Z'"`,    // 9 digits
		`W/"datetime'2021-08-31T15%3A42%3A05.83822639Z'"`,     // 8 digits, truncated
		`W/"datetime'2021-08-31T16%3A42%3A05.8382263+01:00'"`, // offset
		`  W/"datetime'2021-08-31T15%3A42%3A05.8382263Z'"  `,
	}
	for _, s := range accepted {
		t.Run("parse/"+s, func(t *testing.T) {
			got, err := ParseETag(s)
			if err != nil || !got.Equal(ts) {
				t.Fatalf("ParseETag = %v, %v; want %v", got, err, ts)
			}
		})
	}
	t.Run("parse/no fraction", func(t *testing.T) {
		got, err := ParseETag(`W/"datetime'2021-08-31T15%3A42%3A05Z'"`)
		if err != nil || !got.Equal(time.Date(2021, 8, 31, 15, 42, 5, 0, time.UTC)) {
			t.Fatalf("ParseETag = %v, %v", got, err)
		}
	})
	for _, s := range []string{
		"", "*", `W/""`, `"0x8D9A1B2C3D4E5F6"`, `W/"datetime''"`, `W/"datetime'2021-08-31'"`,
		`W/"datetime'2021-08-31T15%3A42%3A05.8382263Z"`, `W/"datetime'2021-02-30T00%3A00%3A00Z'"`,
		`W/"datetime'2021-08-31T15%3B42%3A05Z'"`, `W/"time'2021-08-31T15%3A42%3A05Z'"`,
	} {
		t.Run("reject/"+s, func(t *testing.T) {
			if _, err := ParseETag(s); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("ParseETag(%q) error = %v", s, err)
			}
		})
	}

	t.Run("round trip", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < 10000; i++ {
			ts := TruncateTick(time.Unix(r.Int64N(253402300799-(-11644473600))-11644473600, r.Int64N(1e9)))
			got, err := ParseETag(FormatETag(ts))
			if err != nil || !got.Equal(ts) {
				t.Fatalf("%v: ParseETag(FormatETag) = %v, %v", ts, got, err)
			}
			if got2 := mustTime(FormatTimestamp(ts)); !got2.Equal(ts) {
				t.Fatalf("%v: ParseDateTime(FormatTimestamp) = %v", ts, got2)
			}
		}
	})
}

func TestTruncateTick(t *testing.T) {
	in := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("z", -3600))
	got := TruncateTick(in)
	if want := time.Date(2024, 5, 6, 8, 8, 9, 123456700, time.UTC); got != want {
		t.Fatalf("TruncateTick = %v, want %v", got, want)
	}
	if now := TruncateTick(time.Now()); now != now.Round(0) {
		t.Error("monotonic reading kept")
	}
}

func TestParseDateTime(t *testing.T) {
	tests := []struct {
		in   string
		want time.Time
	}{
		{"2024-01-02T03:04:05.1234567Z", time.Date(2024, 1, 2, 3, 4, 5, 123456700, time.UTC)},
		{"2024-01-02T03:04:05Z", time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)},
		{"2024-01-02t03:04:05z", time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)},
		{"2024-01-02T03:04:05", time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)},
		{"2024-01-02T03:04Z", time.Date(2024, 1, 2, 3, 4, 0, 0, time.UTC)},
		{"2024-01-02T03:04:05.5+02:00", time.Date(2024, 1, 2, 1, 4, 5, 500000000, time.UTC)},
		{"2024-01-02T03:04:05-05:30", time.Date(2024, 1, 2, 8, 34, 5, 0, time.UTC)},
		{"2024-01-02T03:04:05.123456789123Z", time.Date(2024, 1, 2, 3, 4, 5, 123456700, time.UTC)},
		{"2024-02-29T00:00:00Z", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"0001-01-01T00:00:00Z", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDateTime(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("ParseDateTime = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	for _, in := range []string{
		"", "2024", "2024-01-02", "2024-01-02 03:04:05Z", "2024-1-02T03:04:05Z", "2024-13-02T03:04:05Z",
		"2023-02-29T00:00:00Z", "2024-01-02T24:00:00Z", "2024-01-02T03:60:00Z", "2024-01-02T03:04:60Z",
		"2024-01-02T03:04:05.Z", "2024-01-02T03:04:05+0200", "2024-01-02T03:04:05+24:00", "2024-01-02T03:04:05ZZ",
		"0000-01-01T00:00:00Z", "9999-12-31T23:00:00-02:00", "0001-01-01T00:00:00+01:00", "+2024-01-02T03:04:05Z",
	} {
		t.Run("reject/"+in, func(t *testing.T) {
			if _, err := ParseDateTime(in); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("ParseDateTime(%q) error = %v", in, err)
			}
		})
	}
}
