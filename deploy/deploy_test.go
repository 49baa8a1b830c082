package deploy

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tablestore/frontend"
	"tablestore/frontend/router"
	"tablestore/internal/masterclient"
	"tablestore/master"
	"tablestore/partitionserver"
)

// The server roles whose command lines the deploy files hold.
const (
	roleMaster          = "master"
	rolePartitionServer = "partitionserver"
	roleFrontend        = "frontend"
)

// ---------------------------------------------------------------------------
// The real binary: its subcommands and flags.

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error

	flagsMu    sync.Mutex
	flagsCache = map[string]map[string]bool{}
	cmdsCache  map[string]bool
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// tablestoreBinary builds cmd/tablestore once per test run.
func tablestoreBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "tablestore-deploy-test-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "tablestore")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", binPath, "../cmd/tablestore").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ../cmd/tablestore: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// runBinary runs the binary with args (in a scratch directory, never longer
// than 20 s) and returns its combined output; the exit status is not an
// error (the ctl command lines TestDocsCtlCommands runs fail by design, exit 1).
func runBinary(t *testing.T, args ...string) string {
	t.Helper()
	bin := tablestoreBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("tablestore %s did not exit within 20s (did it start a server?)\n%s", strings.Join(args, " "), out)
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("tablestore %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

var commandLineRE = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)\s{2,}\S`)

// subcommands returns the commands `tablestore help` lists.
func subcommands(t *testing.T) map[string]bool {
	t.Helper()
	flagsMu.Lock()
	defer flagsMu.Unlock()
	if cmdsCache != nil {
		return cmdsCache
	}
	out := runBinary(t, "help")
	cmds := map[string]bool{}
	inCommands := false
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "commands:" {
			inCommands = true
			continue
		}
		if m := commandLineRE.FindStringSubmatch(line); inCommands && m != nil {
			cmds[m[1]] = true
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("no commands in `tablestore help` output:\n%s", out)
	}
	cmdsCache = cmds
	return cmds
}

var flagLineRE = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9_.-]*)`)

// roleFlags returns the flag names `tablestore <role> -h` prints.
func roleFlags(t *testing.T, role string) map[string]bool {
	t.Helper()
	if !subcommands(t)[role] {
		t.Fatalf("tablestore has no command %q (it has %v)", role, sortedKeys(subcommands(t)))
	}
	flagsMu.Lock()
	defer flagsMu.Unlock()
	if f, ok := flagsCache[role]; ok {
		return f
	}
	out := runBinary(t, role, "-h")
	flags := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if m := flagLineRE.FindStringSubmatch(line); m != nil {
			flags[m[1]] = true
		}
	}
	if len(flags) == 0 {
		t.Fatalf("no flags in `tablestore %s -h` output:\n%s", role, out)
	}
	flagsCache[role] = flags
	return flags
}

// flagErrorRE matches the flag package's parse errors.
var flagErrorRE = regexp.MustCompile(`invalid (boolean )?value|flag provided but not defined|bad flag syntax|flag needs an argument`)

var argRE = regexp.MustCompile(`^--([A-Za-z0-9][A-Za-z0-9_.-]*)=(.*)$`)

// checkCommand checks one command line (subcommand first, then
// --flag=value items with every variable already substituted) against the
// binary and returns its flags. Names are checked against `-h`; values by
// letting the binary parse the whole line followed by -h, which stops
// before anything starts.
func checkCommand(t *testing.T, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 {
		t.Fatal("empty command")
	}
	role := args[0]
	known := roleFlags(t, role)
	flags := map[string]string{}
	for _, a := range args[1:] {
		m := argRE.FindStringSubmatch(a)
		if m == nil {
			t.Errorf("argument %q: write every argument as --flag=value (a bare value would end flag parsing)", a)
			continue
		}
		name, val := m[1], m[2]
		if !known[name] {
			t.Errorf("tablestore %s has no flag --%s (it has %v)", role, name, sortedKeys(known))
			continue
		}
		if _, dup := flags[name]; dup {
			t.Errorf("flag --%s given twice", name)
		}
		if strings.Contains(val, "$") {
			t.Errorf("--%s=%s: unresolved variable", name, val)
		}
		flags[name] = val
	}
	if t.Failed() {
		t.FailNow()
	}
	out := runBinary(t, append(slices.Clone(args), "-h")...)
	if flagErrorRE.MatchString(out) || !strings.Contains(out, "Usage of "+role) {
		t.Fatalf("tablestore rejects the command line %q:\n%s", args, firstLines(out, 5))
	}
	if err := validateConfig(role, flags); err != nil {
		t.Fatalf("the %s would refuse to start: %v", role, err)
	}
	return flags
}

// validateConfig applies the flags to the role's own config (its
// RegisterFlags and defaults) and runs its Validate, which the binary does
// only after -h: e.g. a master's --peers must include its --id, and the
// front-end's account name and key must be valid. Flags the role packages do
// not register (the common --log-level and --metrics-addr) were checked by
// the binary above.
func validateConfig(role string, flags map[string]string) error {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	var validate func() error
	switch role {
	case roleMaster:
		c := master.DefaultConfig()
		c.RegisterFlags(fs)
		validate = c.Validate
	case rolePartitionServer:
		c := partitionserver.DefaultConfig()
		c.RegisterFlags(fs)
		validate = c.Validate
	case roleFrontend:
		fc, rc := frontend.DefaultConfig(), router.DefaultConfig()
		fc.RegisterFlags(fs)
		rc.RegisterFlags(fs)
		validate = func() error { return errors.Join(fc.Validate(), rc.Validate()) }
	default:
		return nil
	}
	for name, val := range flags {
		if fs.Lookup(name) == nil {
			continue
		}
		if err := fs.Set(name, val); err != nil {
			return fmt.Errorf("--%s=%s: %w", name, val, err)
		}
	}
	return validate()
}

// ---------------------------------------------------------------------------
// Small helpers.

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func loadYAML(t *testing.T, path string) []any {
	t.Helper()
	docs, err := parseYAML(readFile(t, path))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return docs
}

// get walks nested mappings; nil when any step is missing.
func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any, path ...string) string {
	s, _ := get(v, path...).(string)
	return s
}

func mapAt(v any, path ...string) map[string]any {
	m, _ := get(v, path...).(map[string]any)
	return m
}

func listAt(v any, path ...string) []any {
	l, _ := get(v, path...).([]any)
	return l
}

// stringList converts a sequence of scalars.
func stringList(t *testing.T, v any, what string) []string {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%s: want a sequence, have %T", what, v)
	}
	out := make([]string, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			t.Fatalf("%s[%d]: want a string, have %T", what, i, e)
		}
		out[i] = s
	}
	return out
}

// labels converts a mapping of scalars.
func labels(v any) map[string]string {
	out := map[string]string{}
	m, _ := v.(map[string]any)
	for k, e := range m {
		s, _ := e.(string)
		out[k] = s
	}
	return out
}

// subset reports whether every label of sel is in lbls.
func subset(sel, lbls map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if lbls[k] != v {
			return false
		}
	}
	return true
}

func splitAddr(t *testing.T, name, addr string) (host, port string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("--%s=%s: %v", name, addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		t.Fatalf("--%s=%s: bad port", name, addr)
	}
	return host, port
}

// advertisable reports whether a listen host is also an address others can
// dial (the master's Raft transport advertises its --raft-addr).
func advertisable(host string) bool {
	if host == "" || host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !(ip.IsUnspecified() || ip.IsLoopback())
}

// ---------------------------------------------------------------------------
// Dockerfile.

func TestDockerfile(t *testing.T) {
	src := readFile(t, "Dockerfile")
	// Join continuation lines, drop comments.
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, strings.Join(strings.Fields(cur.String()), " "))
		cur.Reset()
	}
	type stage struct {
		from  string
		lines []string
	}
	var stages []stage
	for _, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			stages = append(stages, stage{from: l})
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("instruction before FROM: %s", l)
		}
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, l)
	}
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage build, have %d stage(s)", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	has := func(st stage, re string) bool {
		r := regexp.MustCompile(re)
		for _, l := range st.lines {
			if r.MatchString(l) {
				return true
			}
		}
		return false
	}

	gomod := readFile(t, "../go.mod")
	// The exact version: the golang images set GOTOOLCHAIN=local, so an
	// older builder refuses go.mod's go line, and a newer floating tag
	// builds another binary from the same commit. A toolchain line, when
	// present, is the version the module builds with.
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+(?:\.\d+)?)\s*$`).FindStringSubmatch(gomod)
	if goVer == nil {
		t.Fatal("no go directive in go.mod")
	}
	if tc := regexp.MustCompile(`(?m)^toolchain go(\d+\.\d+(?:\.\d+)?)\s*$`).FindStringSubmatch(gomod); tc != nil {
		goVer = tc
	}
	tests := []struct {
		name string
		ok   bool
	}{
		{"builder is golang:" + goVer[1] + " (go.mod's go " + goVer[1] + ")",
			regexp.MustCompile(`^FROM (--platform=\S+ )?golang:` + regexp.QuoteMeta(goVer[1]) + `(-\S+)? AS \w+$`).MatchString(build.from)},
		{"builder sets CGO_ENABLED=0", has(build, `\bCGO_ENABLED=0\b`)},
		{"builder runs go build -trimpath -o /tablestore ./cmd/tablestore",
			has(build, `^RUN .*\bgo build\b.* -trimpath\b.* -o /tablestore \./cmd/tablestore$`)},
		{"runtime is distroless or debian-slim",
			regexp.MustCompile(`^FROM (gcr\.io/distroless/\S+|debian:\S+-slim)$`).MatchString(final.from)},
		{"runtime copies the binary from the builder", has(final, `^COPY --from=\w+ /tablestore /tablestore$`)},
		{"runtime runs as a non-root user", has(final, `^USER (\d*[1-9]\d*|nonroot)(:\d+)?$`) && !has(final, `^USER (root|0)\b`)},
		{`ENTRYPOINT ["/tablestore"]`, has(final, `^ENTRYPOINT \["/tablestore"\]$`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.ok {
				t.Errorf("Dockerfile: %s: no", tc.name)
			}
		})
	}
	if _, err := os.Stat("../cmd/tablestore"); err != nil {
		t.Errorf("build path ./cmd/tablestore: %v", err)
	}
}

// ---------------------------------------------------------------------------
// docker compose.

var composeVarRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// composeInterpolate applies compose's ${VAR:-default} with VAR unset; a
// variable without a default would be empty, which the test refuses.
func composeInterpolate(t *testing.T, s string) string {
	t.Helper()
	s = strings.ReplaceAll(s, "$$", "\x00")
	s = composeVarRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := composeVarRE.FindStringSubmatch(m)
		if !strings.Contains(m, "-") {
			t.Errorf("%s: give compose variables a default (${%s:-...})", m, sub[1])
		}
		return sub[2]
	})
	if strings.Contains(s, "$") {
		t.Errorf("%q: unsupported variable syntax", s)
	}
	return strings.ReplaceAll(s, "\x00", "$")
}

type composeService struct {
	name  string
	host  string // hostname, or the service name
	role  string
	flags map[string]string
	raw   map[string]any
}

func TestCompose(t *testing.T) {
	docs := loadYAML(t, "docker-compose.yml")
	if len(docs) != 1 {
		t.Fatalf("want one document, have %d", len(docs))
	}
	doc := docs[0]
	services := mapAt(doc, "services")
	if len(services) == 0 {
		t.Fatal("no services")
	}
	volumes := mapAt(doc, "volumes")

	var all []*composeService
	byRole := map[string][]*composeService{}
	var firstImage string
	var firstBuild map[string]any
	for _, name := range sortedKeys(services) {
		raw, _ := services[name].(map[string]any)
		s := &composeService{name: name, host: name, raw: raw}
		if h := str(raw, "hostname"); h != "" {
			s.host = h
		}
		t.Run("service/"+name, func(t *testing.T) {
			image, build := str(raw, "image"), mapAt(raw, "build")
			if image == "" || build == nil {
				t.Fatal("want image and build (every service builds the same image)")
			}
			if firstImage == "" {
				firstImage, firstBuild = image, build
			} else if image != firstImage || !reflect.DeepEqual(build, firstBuild) {
				t.Errorf("image/build differ from the other services (%s %v vs %s %v): compose would build several images", image, build, firstImage, firstBuild)
			}
			ctxDir := str(build, "context")
			if _, err := os.Stat(filepath.Join(ctxDir, "go.mod")); err != nil {
				t.Errorf("build context %q is not the module root: %v", ctxDir, err)
			}
			if _, err := os.Stat(filepath.Join(ctxDir, str(build, "dockerfile"))); err != nil {
				t.Errorf("dockerfile: %v", err)
			}
			for _, d := range dependsOn(t, raw) {
				if _, ok := services[d]; !ok {
					t.Errorf("depends_on %q: no such service", d)
				}
			}
			args := stringList(t, get(raw, "command"), "command")
			if len(args) == 0 {
				t.Fatal("no command")
			}
			for i := range args {
				args[i] = composeInterpolate(t, args[i])
			}
			s.role = args[0]
			s.flags = checkCommand(t, args)
			if s.flags["metrics-addr"] == "" {
				t.Error("no --metrics-addr")
			}
			if dir := s.flags["data-dir"]; s.role == roleMaster || s.role == rolePartitionServer {
				checkComposeVolume(t, raw, volumes, dir)
			}
		})
		all = append(all, s)
		byRole[s.role] = append(byRole[s.role], s)
	}
	if t.Failed() {
		return
	}

	t.Run("roles", func(t *testing.T) {
		if n := len(byRole[roleMaster]); n != 3 {
			t.Errorf("%d masters, want 3", n)
		}
		if n := len(byRole[rolePartitionServer]); n != 3 {
			t.Errorf("%d partition servers, want 3", n)
		}
		if n := len(byRole[roleFrontend]); n < 1 {
			t.Errorf("no front-end")
		}
	})

	// The master group: ids, peers and the addresses others use.
	masterIDs := map[string]*composeService{}
	var masterAddrs []string
	for _, m := range byRole[roleMaster] {
		masterIDs[m.flags["id"]] = m
		_, port := splitAddr(t, "grpc-addr", m.flags["grpc-addr"])
		masterAddrs = append(masterAddrs, net.JoinHostPort(m.host, port))
	}
	for _, m := range byRole[roleMaster] {
		t.Run("master/"+m.name, func(t *testing.T) {
			host, _ := splitAddr(t, "raft-addr", m.flags["raft-addr"])
			if host != m.host && host != m.name {
				t.Errorf("--raft-addr=%s: the master binds and advertises it, so its host must be this container (%s)", m.flags["raft-addr"], m.host)
			}
			peers, err := master.ParsePeers(m.flags["peers"])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := sortedKeys(peers), sortedKeys(masterIDs); !slices.Equal(got, want) {
				t.Fatalf("--peers ids %v, want the --id of every master %v", got, want)
			}
			for id, addr := range peers {
				peer := masterIDs[id]
				_, port := splitAddr(t, "raft-addr", peer.flags["raft-addr"])
				if want := net.JoinHostPort(peer.host, port); addr != want && addr != net.JoinHostPort(peer.name, port) {
					t.Errorf("--peers %s=%s, want %s (service %s's --raft-addr port)", id, addr, want, peer.name)
				}
			}
		})
	}
	psIDs := map[string]bool{}
	for _, p := range byRole[rolePartitionServer] {
		t.Run("partitionserver/"+p.name, func(t *testing.T) {
			if id := p.flags["id"]; id == "" || psIDs[id] {
				t.Errorf("--id=%q: want a unique id", id)
			}
			psIDs[p.flags["id"]] = true
			for _, f := range []string{"grpc", "raft"} {
				_, port := splitAddr(t, f+"-addr", p.flags[f+"-addr"])
				adv := p.flags["advertise-"+f]
				if adv != net.JoinHostPort(p.host, port) && adv != net.JoinHostPort(p.name, port) {
					t.Errorf("--advertise-%s=%s, want %s", f, adv, net.JoinHostPort(p.name, port))
				}
			}
			checkMasters(t, p.flags, masterAddrs)
		})
	}
	for _, f := range byRole[roleFrontend] {
		t.Run("frontend/"+f.name, func(t *testing.T) {
			checkMasters(t, f.flags, masterAddrs)
			_, port := splitAddr(t, "http-addr", f.flags["http-addr"])
			published := false
			for _, p := range listAt(f.raw, "ports") {
				ps, _ := p.(string)
				if ps == "10002:"+port || ps == "127.0.0.1:10002:"+port {
					published = true
				}
			}
			if !published {
				t.Errorf("ports %v do not publish 10002 to the --http-addr port %s", listAt(f.raw, "ports"), port)
			}
		})
	}
	t.Run("volumes", func(t *testing.T) {
		used := map[string]string{}
		for _, s := range all {
			for _, v := range listAt(s.raw, "volumes") {
				vs, _ := v.(string)
				name, _, _ := strings.Cut(vs, ":")
				if other, ok := used[name]; ok {
					t.Errorf("volume %s used by %s and %s", name, other, s.name)
				}
				used[name] = s.name
			}
		}
	})
}

func dependsOn(t *testing.T, svc map[string]any) []string {
	t.Helper()
	switch d := get(svc, "depends_on").(type) {
	case nil:
		return nil
	case []any:
		return stringList(t, d, "depends_on")
	case map[string]any:
		return sortedKeys(d)
	default:
		t.Fatalf("depends_on: unexpected %T", d)
		return nil
	}
}

// checkComposeVolume checks that --data-dir is a named volume's mount point.
func checkComposeVolume(t *testing.T, svc, volumes map[string]any, dataDir string) {
	t.Helper()
	if dataDir == "" {
		t.Error("no --data-dir (the default is relative to the working directory)")
		return
	}
	for _, v := range listAt(svc, "volumes") {
		vs, _ := v.(string)
		parts := strings.Split(vs, ":")
		if len(parts) < 2 || filepath.Clean(parts[1]) != filepath.Clean(dataDir) {
			continue
		}
		if _, ok := volumes[parts[0]]; !ok {
			t.Errorf("volume %q is not declared under the top-level volumes", parts[0])
		}
		return
	}
	t.Errorf("--data-dir=%s is not a volume mount point: the state would be lost with the container", dataDir)
}

// checkMasters compares --masters with the master addresses.
func checkMasters(t *testing.T, flags map[string]string, want []string) {
	t.Helper()
	got := masterclient.ParseAddrs(flags["masters"])
	if !slices.Equal(sortedStrings(got), sortedStrings(want)) {
		t.Errorf("--masters=%s, want every master: %s", flags["masters"], strings.Join(want, ","))
	}
}

func sortedStrings(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// ---------------------------------------------------------------------------
// Kubernetes.

const k8sDir = "kubernetes"

type k8sObject struct {
	file string
	doc  map[string]any
}

func (o k8sObject) kind() string { return str(o.doc, "kind") }
func (o k8sObject) name() string { return str(o.doc, "metadata", "name") }
func (o k8sObject) id() string   { return o.kind() + "/" + o.name() }

// k8sPod is one pod of a workload as the test sees it: its name and the
// flags of its tablestore container after substitution.
type k8sPod struct {
	name  string
	flags map[string]string
}

type k8sWorkload struct {
	obj      k8sObject
	role     string
	replicas int
	ports    map[string]string // containerPort name -> number (and number -> number)
	pods     []k8sPod
}

func loadKubernetes(t *testing.T) (kust map[string]any, objs []k8sObject) {
	t.Helper()
	kdocs := loadYAML(t, filepath.Join(k8sDir, "kustomization.yaml"))
	if len(kdocs) != 1 {
		t.Fatalf("kustomization.yaml: want one document")
	}
	kust, _ = kdocs[0].(map[string]any)
	resources := stringList(t, get(kust, "resources"), "kustomization resources")
	for _, r := range resources {
		for _, d := range loadYAML(t, filepath.Join(k8sDir, r)) {
			m, ok := d.(map[string]any)
			if !ok {
				t.Fatalf("%s: a document is not a mapping", r)
			}
			objs = append(objs, k8sObject{file: r, doc: m})
		}
	}
	return kust, objs
}

func TestKubernetes(t *testing.T) {
	kust, objs := loadKubernetes(t)
	ns := str(kust, "namespace")

	t.Run("kustomization", func(t *testing.T) {
		if str(kust, "kind") != "Kustomization" {
			t.Errorf("kind %q", str(kust, "kind"))
		}
		files, err := filepath.Glob(filepath.Join(k8sDir, "*.y*ml"))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, f := range files {
			if b := filepath.Base(f); b != "kustomization.yaml" {
				want = append(want, b)
			}
		}
		got := stringList(t, get(kust, "resources"), "resources")
		if !slices.Equal(sortedStrings(got), sortedStrings(want)) {
			t.Errorf("resources %v, want every manifest in %s: %v", got, k8sDir, want)
		}
		if ns == "" {
			t.Error("no namespace")
		}
	})

	// Every object: identity and namespace.
	byID := map[string]k8sObject{}
	var namespaces []string
	for _, o := range objs {
		t.Run("object/"+o.id(), func(t *testing.T) {
			if str(o.doc, "apiVersion") == "" || o.kind() == "" || o.name() == "" {
				t.Fatalf("%s: want apiVersion, kind and metadata.name", o.file)
			}
			if _, dup := byID[o.id()]; dup {
				t.Errorf("%s: %s defined twice", o.file, o.id())
			}
			if o.kind() == "Namespace" {
				namespaces = append(namespaces, o.name())
			} else if got := str(o.doc, "metadata", "namespace"); got != ns {
				t.Errorf("%s: namespace %q, want the kustomization's %q", o.file, got, ns)
			}
		})
		byID[o.id()] = o
	}
	t.Run("namespace", func(t *testing.T) {
		if !slices.Equal(namespaces, []string{ns}) {
			t.Errorf("Namespace objects %v, want [%s]", namespaces, ns)
		}
	})
	if t.Failed() {
		return
	}

	// Workloads: every pod's command line against the binary.
	var workloads []*k8sWorkload
	byRole := map[string][]*k8sWorkload{}
	for _, o := range objs {
		if o.kind() != "StatefulSet" && o.kind() != "Deployment" {
			continue
		}
		w := &k8sWorkload{obj: o}
		t.Run("workload/"+o.id(), func(t *testing.T) {
			checkWorkload(t, w, ns, byID, kust)
		})
		workloads = append(workloads, w)
		byRole[w.role] = append(byRole[w.role], w)
	}
	if t.Failed() {
		return
	}
	for _, role := range []string{roleMaster, rolePartitionServer, roleFrontend} {
		if len(byRole[role]) != 1 {
			t.Fatalf("%d workloads run tablestore %s, want 1", len(byRole[role]), role)
		}
	}
	masters, servers, frontends := byRole[roleMaster][0], byRole[rolePartitionServer][0], byRole[roleFrontend][0]

	// Cross-checks between the roles.
	mSvc := str(masters.obj.doc, "spec", "serviceName")
	var masterAddrs []string
	for _, p := range masters.pods {
		_, port := splitAddr(t, "grpc-addr", p.flags["grpc-addr"])
		masterAddrs = append(masterAddrs, net.JoinHostPort(podDNS(p.name, mSvc, ns), port))
	}
	t.Run("masters", func(t *testing.T) {
		if masters.obj.kind() != "StatefulSet" || masters.replicas != 3 {
			t.Fatalf("masters: want a StatefulSet of 3, have %s of %d", masters.obj.kind(), masters.replicas)
		}
		ids := map[string]k8sPod{}
		for _, p := range masters.pods {
			ids[p.name] = p
		}
		for _, p := range masters.pods {
			t.Run(p.name, func(t *testing.T) {
				if p.flags["id"] != p.name {
					t.Errorf("--id=%s, want the pod name %s (stable across restarts)", p.flags["id"], p.name)
				}
				host, _ := splitAddr(t, "raft-addr", p.flags["raft-addr"])
				if !advertisable(host) {
					t.Errorf("--raft-addr=%s: the master's Raft transport advertises this address, so it must be the pod's own (not %q)", p.flags["raft-addr"], host)
				}
				peers, err := master.ParsePeers(p.flags["peers"])
				if err != nil {
					t.Fatal(err)
				}
				if got, want := sortedKeys(peers), sortedKeys(ids); !slices.Equal(got, want) {
					t.Fatalf("--peers ids %v, want the pod names %v", got, want)
				}
				for id, addr := range peers {
					_, port := splitAddr(t, "raft-addr", ids[id].flags["raft-addr"])
					if want := net.JoinHostPort(podDNS(id, mSvc, ns), port); addr != want {
						t.Errorf("--peers %s=%s, want %s", id, addr, want)
					}
				}
			})
		}
	})
	t.Run("partitionservers", func(t *testing.T) {
		if servers.obj.kind() != "StatefulSet" || servers.replicas < replicationFactor(t, masters) {
			t.Fatalf("partition servers: want a StatefulSet of at least the replication factor (%d), have %s of %d",
				replicationFactor(t, masters), servers.obj.kind(), servers.replicas)
		}
		svc := str(servers.obj.doc, "spec", "serviceName")
		for _, p := range servers.pods {
			t.Run(p.name, func(t *testing.T) {
				if p.flags["id"] != p.name {
					t.Errorf("--id=%s, want the pod name %s (stable across restarts)", p.flags["id"], p.name)
				}
				for _, f := range []string{"grpc", "raft"} {
					_, port := splitAddr(t, f+"-addr", p.flags[f+"-addr"])
					if want := net.JoinHostPort(podDNS(p.name, svc, ns), port); p.flags["advertise-"+f] != want {
						t.Errorf("--advertise-%s=%s, want the pod's stable name %s", f, p.flags["advertise-"+f], want)
					}
				}
				checkMasters(t, p.flags, masterAddrs)
			})
		}
	})
	t.Run("frontends", func(t *testing.T) {
		if frontends.obj.kind() != "Deployment" || frontends.replicas < 2 {
			t.Errorf("front-ends: want a Deployment of at least 2, have %s of %d", frontends.obj.kind(), frontends.replicas)
		}
		for _, p := range frontends.pods {
			checkMasters(t, p.flags, masterAddrs)
		}
		_, port := splitAddr(t, "http-addr", frontends.pods[0].flags["http-addr"])
		exposed := false
		for _, o := range objs {
			if o.kind() != "Service" || !subset(labels(get(o.doc, "spec", "selector")), labels(get(frontends.obj.doc, "spec", "template", "metadata", "labels"))) {
				continue
			}
			for _, sp := range listAt(o.doc, "spec", "ports") {
				if str(sp, "port") == "10002" && frontends.ports[targetPort(sp)] == port {
					exposed = true
				}
			}
		}
		if !exposed {
			t.Errorf("no Service exposes port 10002 to the front-ends' --http-addr port %s", port)
		}
	})

	// Services select a workload and target its ports.
	for _, o := range objs {
		if o.kind() != "Service" {
			continue
		}
		t.Run("service/"+o.name(), func(t *testing.T) {
			// A Service may select several workloads (tablestore-metrics
			// selects all): each must have every targeted port.
			sel := labels(get(o.doc, "spec", "selector"))
			var targets []*k8sWorkload
			for _, w := range workloads {
				if subset(sel, labels(get(w.obj.doc, "spec", "template", "metadata", "labels"))) {
					targets = append(targets, w)
				}
			}
			if len(targets) == 0 {
				t.Fatalf("selector %v matches no workload", sel)
			}
			ports := listAt(o.doc, "spec", "ports")
			if len(ports) == 0 {
				t.Fatal("no ports")
			}
			for _, target := range targets {
				for _, sp := range ports {
					if _, ok := target.ports[targetPort(sp)]; !ok {
						t.Errorf("port %s targets %q, not a container port of %s", str(sp, "port"), targetPort(sp), target.obj.id())
					}
				}
			}
		})
	}

	// PodDisruptionBudgets: one per workload, never more than one pod at
	// a time (three masters keep a quorum with one gone; every range has
	// three replicas on three of the servers; the front-ends run at least
	// two, so one stays serving).
	for _, w := range []*k8sWorkload{masters, servers, frontends} {
		t.Run("pdb/"+w.obj.name(), func(t *testing.T) {
			sel := labels(get(w.obj.doc, "spec", "selector", "matchLabels"))
			var pdbs []k8sObject
			for _, o := range objs {
				if o.kind() == "PodDisruptionBudget" && reflect.DeepEqual(labels(get(o.doc, "spec", "selector", "matchLabels")), sel) {
					pdbs = append(pdbs, o)
				}
			}
			if len(pdbs) != 1 {
				t.Fatalf("%d PodDisruptionBudgets select %v, want 1", len(pdbs), sel)
			}
			spec := mapAt(pdbs[0].doc, "spec")
			allowed := -1
			if v := str(spec, "maxUnavailable"); v != "" {
				allowed, _ = strconv.Atoi(v)
			} else if v := str(spec, "minAvailable"); v != "" {
				n, _ := strconv.Atoi(v)
				allowed = w.replicas - n
			}
			if allowed != 1 {
				t.Errorf("PodDisruptionBudget %s allows %d pods down at once, want 1 (set minAvailable or maxUnavailable as a number)", pdbs[0].name(), allowed)
			}
		})
	}
}

// podDNS is the stable DNS name of a StatefulSet pod under its headless
// Service, valid from any namespace.
func podDNS(pod, service, ns string) string { return pod + "." + service + "." + ns + ".svc" }

func targetPort(sp any) string {
	if tp := str(sp, "targetPort"); tp != "" {
		return tp
	}
	return str(sp, "port")
}

func replicationFactor(t *testing.T, masters *k8sWorkload) int {
	t.Helper()
	if v := masters.pods[0].flags["replication-factor"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return master.DefaultConfig().ReplicationFactor
}

// checkWorkload checks one StatefulSet or Deployment and fills w.
func checkWorkload(t *testing.T, w *k8sWorkload, ns string, byID map[string]k8sObject, kust map[string]any) {
	o := w.obj
	spec := mapAt(o.doc, "spec")
	tmpl := mapAt(spec, "template")
	podLabels := labels(get(tmpl, "metadata", "labels"))
	if sel := labels(get(spec, "selector", "matchLabels")); !subset(sel, podLabels) {
		t.Errorf("selector %v does not match the pod labels %v", sel, podLabels)
	}
	replicas := str(spec, "replicas")
	if replicas == "" && o.kind() == "Deployment" {
		// A HorizontalPodAutoscaler owns the count: it runs at least
		// minReplicas.
		for _, h := range byID {
			if h.kind() == "HorizontalPodAutoscaler" && str(h.doc, "spec", "scaleTargetRef", "kind") == "Deployment" &&
				str(h.doc, "spec", "scaleTargetRef", "name") == o.name() {
				replicas = str(h.doc, "spec", "minReplicas")
			}
		}
	}
	var err error
	if w.replicas, err = strconv.Atoi(replicas); err != nil {
		t.Fatalf("spec.replicas (or its HorizontalPodAutoscaler's minReplicas): %v", err)
	}
	containers := listAt(tmpl, "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("want one container, have %d", len(containers))
	}
	c := containers[0]

	// Image: the kustomization's images entry names it.
	image := str(c, "image")
	var imageNames []string
	for _, im := range listAt(kust, "images") {
		imageNames = append(imageNames, str(im, "name"))
	}
	if !slices.Contains(imageNames, image) {
		t.Errorf("image %q is not one of the kustomization's images %v", image, imageNames)
	}

	// Ports, by name and number.
	w.ports = map[string]string{}
	for _, p := range listAt(c, "ports") {
		num := str(p, "containerPort")
		w.ports[num] = num
		if n := str(p, "name"); n != "" {
			w.ports[n] = num
		}
	}
	for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
		pr := mapAt(c, probe)
		if pr == nil {
			t.Errorf("no %s", probe)
			continue
		}
		port := str(pr, "tcpSocket", "port")
		if port == "" {
			port = str(pr, "httpGet", "port")
		}
		if _, ok := w.ports[port]; !ok {
			t.Errorf("%s port %q is not a container port", probe, port)
		}
	}
	for _, r := range []string{"cpu", "memory"} {
		if str(c, "resources", "requests", r) == "" {
			t.Errorf("no resources.requests.%s", r)
		}
	}

	// Volumes: mounts name a volume or a claim template.
	vols := map[string]bool{}
	persistent := map[string]bool{}
	for _, v := range listAt(tmpl, "spec", "volumes") {
		vols[str(v, "name")] = true
	}
	for _, v := range listAt(spec, "volumeClaimTemplates") {
		vols[str(v, "metadata", "name")] = true
		persistent[str(v, "metadata", "name")] = true
	}
	mounts := map[string]string{} // path -> volume
	for _, m := range listAt(c, "volumeMounts") {
		if !vols[str(m, "name")] {
			t.Errorf("volumeMount %q: no such volume", str(m, "name"))
		}
		mounts[filepath.Clean(str(m, "mountPath"))] = str(m, "name")
	}

	// The StatefulSet's governing Service: headless, publishing pods
	// before they are ready (peers must find each other to start).
	if o.kind() == "StatefulSet" {
		svcName := str(spec, "serviceName")
		svc, ok := byID["Service/"+svcName]
		switch {
		case !ok:
			t.Errorf("serviceName %q: no such Service", svcName)
		case str(svc.doc, "spec", "clusterIP") != "None":
			t.Errorf("Service %s is not headless (clusterIP: None)", svcName)
		case str(svc.doc, "spec", "publishNotReadyAddresses") != "true":
			t.Errorf("Service %s: set publishNotReadyAddresses: true so Raft peers resolve before they are ready", svcName)
		}
	}

	// The command line of every pod (StatefulSet: each ordinal; Deployment:
	// one sample pod), with the pod's environment substituted.
	var podNames []string
	if o.kind() == "StatefulSet" {
		for i := range w.replicas {
			podNames = append(podNames, fmt.Sprintf("%s-%d", o.name(), i))
		}
	} else {
		podNames = []string{o.name() + "-5d8f7c9b6d-x7k2p"}
	}
	args := stringList(t, get(c, "args"), "args")
	if len(args) == 0 {
		t.Fatal("no args")
	}
	w.role = args[0]
	for _, pod := range podNames {
		t.Run(pod, func(t *testing.T) {
			env := podEnv(t, c, pod, ns, byID)
			expanded := make([]string, len(args))
			for i, a := range args {
				expanded[i] = expandK8s(t, a, env)
			}
			flags := checkCommand(t, expanded)
			w.pods = append(w.pods, k8sPod{name: pod, flags: flags})

			// Listen ports are declared container ports.
			for _, f := range []string{"grpc-addr", "raft-addr", "http-addr", "metrics-addr"} {
				if v, ok := flags[f]; ok {
					_, port := splitAddr(t, f, v)
					if _, ok := w.ports[port]; !ok {
						t.Errorf("--%s port %s is not a container port", f, port)
					}
				}
			}
			// Prometheus scrapes --metrics-addr.
			ann := labels(get(tmpl, "metadata", "annotations"))
			if flags["metrics-addr"] == "" {
				t.Error("no --metrics-addr")
			} else if _, port := splitAddr(t, "metrics-addr", flags["metrics-addr"]); ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port {
				t.Errorf("prometheus.io annotations %v, want scrape \"true\" and port %s (--metrics-addr)", ann, port)
			}
			// State lives on a PersistentVolumeClaim.
			if w.role == roleMaster || w.role == rolePartitionServer {
				dir := flags["data-dir"]
				if dir == "" || !filepath.IsAbs(dir) {
					t.Errorf("--data-dir=%q: want an absolute path on the volume", dir)
				} else if !persistent[mounts[filepath.Clean(dir)]] {
					t.Errorf("--data-dir=%s is not the mount point of a volumeClaimTemplate", dir)
				}
			}
		})
	}
}

// podEnv resolves the container's environment for one pod the way the
// kubelet would (downward API, Secrets).
func podEnv(t *testing.T, c any, pod, ns string, byID map[string]k8sObject) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range listAt(c, "env") {
		name := str(e, "name")
		if v, ok := get(e, "value").(string); ok {
			env[name] = v
			continue
		}
		from := mapAt(e, "valueFrom")
		switch {
		case get(from, "fieldRef") != nil:
			switch path := str(from, "fieldRef", "fieldPath"); path {
			case "metadata.name":
				env[name] = pod
			case "metadata.namespace":
				env[name] = ns
			case "status.podIP":
				env[name] = "10.244.1.7"
			case "metadata.labels['topology.kubernetes.io/zone']":
				// Copied from the node at binding where Kubernetes does
				// (KEP-4742); "" elsewhere, which is valid too.
				env[name] = "europe-west1-b"
			default:
				t.Fatalf("env %s: fieldRef %s not modelled by the test", name, path)
			}
		case get(from, "resourceFieldRef") != nil:
			env[name] = "536870912"
		case get(from, "secretKeyRef") != nil:
			sname, key := str(from, "secretKeyRef", "name"), str(from, "secretKeyRef", "key")
			sec, ok := byID["Secret/"+sname]
			if !ok {
				t.Fatalf("env %s: no Secret %s", name, sname)
			}
			if v, ok := get(sec.doc, "stringData", key).(string); ok {
				env[name] = v
			} else if v, ok := get(sec.doc, "data", key).(string); ok {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					t.Fatalf("Secret %s data %s: %v", sname, key, err)
				}
				env[name] = string(b)
			} else {
				t.Fatalf("env %s: Secret %s has no key %s", name, sname, key)
			}
		default:
			t.Fatalf("env %s: value source not modelled by the test", name)
		}
	}
	return env
}

var k8sVarRE = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandK8s applies Kubernetes' $(VAR) expansion; an undefined variable
// would be passed on literally, which the test refuses.
func expandK8s(t *testing.T, s string, env map[string]string) string {
	t.Helper()
	return k8sVarRE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		name := m[2 : len(m)-1]
		v, ok := env[name]
		if !ok {
			t.Errorf("%s: $(%s) is not in the container's env (Kubernetes would pass it on literally)", s, name)
			return m
		}
		return v
	})
}

// TestKustomizeBuild renders the kustomization with kubectl when it is
// installed (it needs no cluster).
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", k8sDir)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "none"))
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize: %v", err)
	}
	_, objs := loadKubernetes(t)
	if got := len(regexp.MustCompile(`(?m)^kind: `).FindAllIndex(out, -1)); got != len(objs) {
		t.Errorf("kubectl kustomize rendered %d objects, the manifests hold %d", got, len(objs))
	}
}
