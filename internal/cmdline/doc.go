// Package cmdline parses the command lines of tablestore's commands alike:
// -h (or --help) prints the command's flags, and a flag that does not parse
// is one line naming it and where the list of flags is, with exit status
// 2, instead of the flag package's error followed by every flag of the
// command (a hundred lines on a terminal, the one that matters at the top).
package cmdline
