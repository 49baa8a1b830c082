package cmdline

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		usage    bool // fs.Usage set
		wantErr  error
		wantMsg  string // the error's text
		wantHelp string // in what help received
	}{
		{name: "parses", args: []string{"--n=3"}},
		{name: "bad value", args: []string{"--n", "x"}, wantErr: ErrUsage,
			wantMsg: `invalid value "x" for flag -n: parse error (tablestore help demo lists the flags)`},
		{name: "unknown flag", args: []string{"--bogus"}, wantErr: ErrUsage,
			wantMsg: `flag provided but not defined: -bogus (tablestore help demo lists the flags)`},
		{name: "help, default usage", args: []string{"-h"}, wantErr: flag.ErrHelp, wantHelp: "Usage of demo:\n  -n int"},
		{name: "help, own usage", args: []string{"--help"}, usage: true, wantErr: flag.ErrHelp, wantHelp: "usage: demo [flags]\n  -n int"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stray, help bytes.Buffer
			fs := flag.NewFlagSet("demo", flag.ContinueOnError)
			fs.SetOutput(&stray)
			n := fs.Int("n", 1, "a number")
			if tc.usage {
				fs.Usage = func() {
					fs.Output().Write([]byte("usage: demo [flags]\n"))
					fs.PrintDefaults()
				}
			}
			err := Parse(fs, tc.args, &help, "tablestore help demo lists the flags")
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if tc.wantMsg != "" && err.Error() != tc.wantMsg {
				t.Errorf("message %q, want %q", err.Error(), tc.wantMsg)
			}
			if stray.Len() > 0 {
				t.Errorf("printed to the flag set's output: %q", stray.String())
			}
			if !strings.HasPrefix(help.String(), tc.wantHelp) || (tc.wantHelp == "" && help.Len() > 0) {
				t.Errorf("help got %q, want it to start with %q", help.String(), tc.wantHelp)
			}
			if tc.wantErr == nil && *n != 3 {
				t.Errorf("n = %d", *n)
			}
			if fs.Output() != &stray {
				t.Error("the flag set's output was not restored")
			}
		})
	}
	if err := Usagef("demo: unexpected argument %q", "x"); !errors.Is(err, ErrUsage) || err.Error() != `demo: unexpected argument "x"` {
		t.Errorf("Usagef: %v", err)
	}
}
