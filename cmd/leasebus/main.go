package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
)

// Exit codes of the command.
const (
	exitOK     = 0 // success
	exitFailed = 1 // a command failed while running, or the demo found a broken guarantee
	exitUsage  = 2 // invalid flags or arguments, or a Redis server that cannot be reached
	// exitInterrupted is the shell's code for a process ended by SIGINT
	// (128+2): the demo exits with it when Ctrl-C stops it early.
	exitInterrupted = 130
)

// redisEnv names the environment variable --redis defaults to.
const redisEnv = "LEASEBUS_REDIS_URL"

// env is what a command reads and writes besides its arguments, so that
// tests and the worker re-exec see the same plumbing.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	hidden  bool // left out of the help (the demo's worker)
	run     func(ctx context.Context, e *env, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{name: "demo", summary: "run several worker processes, kill an owner mid-run, draw the timeline and check the guarantees", run: runDemo},
		{name: "leases", summary: "list live leases: key, holder, fencing token, time left; leases revoke KEY", run: runLeases},
		{name: "threads", summary: "list held threads: owner, run, token, queued signals; threads cancel THREAD", run: runThreads},
		{name: "tail", summary: "print the events of a topic as they arrive", run: runTail},
		{name: "publish", summary: "publish one event to a topic", run: runPublish},
		{name: "topics", summary: "delete a topic: its events and consumer groups (topics delete TOPIC)", run: runTopics},
		{name: workerCommand, hidden: true, run: runWorker},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes the command line args (without the program name) and returns
// the exit code. Errors are written to e.stderr as one line.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		printMainUsage(e.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if name == "help" && len(args) > 1 {
			return run(ctx, e, []string{args[1], "--help"})
		}
		printMainUsage(e.stdout)
		return exitOK
	case "-version", "--version":
		fmt.Fprintln(e.stdout, versionLine())
		return exitOK
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(ctx, e, args[1:])
		if err == nil {
			return exitOK
		}
		return report(e.stderr, c.name, err)
	}
	fmt.Fprintf(e.stderr, "leasebus: unknown command %q (commands: %s; see leasebus --help)\n", name, strings.Join(visibleCommands(), ", "))
	return exitUsage
}

// report writes err as one line and returns its exit code.
func report(w io.Writer, cmd string, err error) int {
	if errors.Is(err, errHelpShown) {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.silent {
		return ee.code
	}
	msg := oneLine(err.Error())
	fmt.Fprintf(w, "leasebus %s: %s\n", cmd, msg)
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailed
}

// oneLine folds a multi-line message into one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func visibleCommands() []string {
	var names []string
	for _, c := range commands {
		if !c.hidden {
			names = append(names, c.name)
		}
	}
	return names
}

func printMainUsage(w io.Writer) {
	fmt.Fprint(w, `leasebus shows leasebus's guarantees at work and looks into a running deployment.

Usage:

	leasebus <command> [flags] [arguments]

Commands:

`)
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(w, "\t%-8s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(w, `
Every command takes --redis URL (default $%s) and --help;
leasebus --version prints the version.
Without a Redis URL, demo runs on an embedded Redis-protocol server.
Run "leasebus <command> --help" for a command's flags.

Exit status: 0 success, 1 failure (or a broken guarantee in the demo),
2 invalid flags or arguments, or an unreachable Redis server,
130 the demo was interrupted (Ctrl-C).
`, redisEnv)
}

// exitError carries an exit code. silent means the message was already
// printed (the demo's verdict).
type exitError struct {
	code   int
	err    error
	silent bool
}

// Error returns the message of the wrapped error.
func (e *exitError) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf returns an error that exits 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// errHelpShown is returned after --help printed the usage: exit 0.
var errHelpShown = errors.New("help shown")

// flagSet is a flag.FlagSet with a usage text, hidden flags and one-line
// errors.
type flagSet struct {
	*flag.FlagSet
	e        *env
	synopsis string // after "Usage: leasebus "
	about    string
	hidden   map[string]bool
}

func newFlagSet(e *env, name, synopsis, about string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, e: e, synopsis: synopsis, about: about, hidden: map[string]bool{}}
}

// hide keeps the named flag out of --help (fault injection, worker plumbing).
func (fs *flagSet) hide(names ...string) {
	for _, n := range names {
		fs.hidden[n] = true
	}
}

// parse parses args, allowing flags after positional arguments
// ("tail TOPIC --group g"). It returns the positional arguments. --help
// prints the usage to stdout and returns errHelpShown; a bad flag returns a
// usage error.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.printUsage(fs.e.stdout)
				return nil, errHelpShown
			}
			return nil, usageErrorf("%s (see leasebus %s --help)", doubleDash(err.Error()), fs.Name())
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at the first non-flag argument, and consumes "--".
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// flagErrorNames matches a flag name as the flag package writes it in its
// errors ("flag provided but not defined: -bogus", "invalid value "x" for
// flag -workers: ...", "flag needs an argument: -redis").
var flagErrorNames = regexp.MustCompile(`(defined: |for flag |for |argument: )-([^-\s:])`)

// doubleDash rewrites the flag names in a flag package error to the
// --name form the help uses.
func doubleDash(msg string) string {
	return flagErrorNames.ReplaceAllString(msg, "$1--$2")
}

func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: leasebus %s\n\n%s\n\nFlags:\n", fs.synopsis, strings.TrimSpace(fs.about))
	var fl []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !fs.hidden[f.Name] {
			fl = append(fl, f)
		}
	})
	sort.Slice(fl, func(i, j int) bool { return fl[i].Name < fl[j].Name })
	for _, f := range fl {
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		fmt.Fprintln(w, line)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
			usage += fmt.Sprintf(" (default %v)", f.DefValue)
		}
		fmt.Fprintf(w, "    \t%s\n", strings.ReplaceAll(usage, "\n", "\n    \t"))
	}
}

// redisFlag registers --redis. Its value, when empty after parsing, is taken
// from LEASEBUS_REDIS_URL by redisURL.
func (fs *flagSet) redisFlag() *string {
	return fs.String("redis", "", "Redis `URL` of one server, not a Cluster node (redis://[:password@]host:port[/db], rediss://, unix://); default $"+redisEnv)
}

// redisURL returns the --redis value or the environment's.
func (fs *flagSet) redisURL(v *string) string {
	if *v != "" {
		return *v
	}
	return strings.TrimSpace(fs.e.getenv(redisEnv))
}

// versionLine returns what --version prints: the module version the binary
// was built from ("(devel)" for a build inside a clone), the VCS revision
// when the build recorded one, and the Go version.
func versionLine() string {
	version, rev := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("leasebus %s%s (%s %s/%s)", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// plural returns "1 worker", "2 workers": n and the noun, with an s unless
// n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
