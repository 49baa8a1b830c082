package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ErrUsage marks a command line that does not parse. The command exits
// with status 2 on it, as the flag package's own commands do.
var ErrUsage = errors.New("cmdline: bad command line")

// usageError is a parse failure's one line; errors.Is(err, ErrUsage).
type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

// Usagef returns an error of a command line that does not parse, for
// checks the flag package does not make (an unexpected argument).
func Usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// Parse parses args into fs. With -h it writes fs's usage to help (fs.Usage
// with fs's output set to help, or the flags' defaults when fs.Usage is
// nil) and returns flag.ErrHelp. A flag that does not parse returns an
// error wrapping ErrUsage: "<the flag package's message> (<see>)", see
// saying where the flags are listed, for the caller to prefix with the
// command; nothing is printed.
func Parse(fs *flag.FlagSet, args []string, help io.Writer, see string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(help)
		defer fs.SetOutput(out)
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(help, "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		return err
	case err != nil:
		return Usagef("%v (%s)", err, see)
	}
	return nil
}
