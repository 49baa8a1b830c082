package deploy

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"

	"tablestore/internal/health"
	"tablestore/partitionserver"
)

// shutdownBound is how long the binary gives a role to stop after SIGTERM
// before it exits anyway (cmd/tablestore's shutdownBound), read from its
// source: package main cannot be imported.
func shutdownBound(t *testing.T) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`(?m)^const shutdownBound = (\d+) \* time\.Second$`).FindStringSubmatch(readFile(t, "../cmd/tablestore/main.go"))
	if m == nil {
		t.Fatal("cmd/tablestore/main.go: no `const shutdownBound = N * time.Second` (update this test with the shutdown path)")
	}
	n, _ := strconv.Atoi(m[1])
	return time.Duration(n) * time.Second
}

// graceMargin is what a grace period keeps beyond the preStop sleep and the
// binary's shutdown bound: the exit itself, and the kubelet's and Docker's
// own latency before they send SIGTERM.
const graceMargin = 5 * time.Second

// TestManifestShutdownFits: the kubelet's SIGKILL (terminationGracePeriod
// after the pod starts terminating) never cuts a shutdown the binary would
// finish: the grace period covers the preStop sleep, the binary's shutdown
// bound and a margin; a partition server's --shutdown-timeout fits in the
// binary's bound. The front-end also sleeps before SIGTERM so that the
// Service's endpoints drop it before it closes its listener.
func TestManifestShutdownFits(t *testing.T) {
	bound := shutdownBound(t)
	to := loadTyped(t)
	for _, w := range to.workloads() {
		t.Run(w.name, func(t *testing.T) {
			spec := w.tmpl.Spec
			c := spec.Containers[0]
			var sleep time.Duration
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
				ps := c.Lifecycle.PreStop
				if ps.Sleep == nil {
					t.Fatalf("preStop is not a sleep action (the distroless image has no shell): %+v", ps)
				}
				sleep = time.Duration(ps.Sleep.Seconds) * time.Second
			}
			grace := 30 * time.Second // Kubernetes' default
			if spec.TerminationGracePeriodSeconds != nil {
				grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			}
			if need := sleep + bound + graceMargin; grace < need {
				t.Errorf("terminationGracePeriodSeconds %v < preStop sleep %v + shutdown bound %v + margin %v", grace, sleep, bound, graceMargin)
			}
			role := c.Args[0]
			if role == roleFrontend && sleep < 3*time.Second {
				t.Errorf("front-end preStop sleep %v: want at least 3s so endpoints drop the pod before its listener closes", sleep)
			}
			if role == rolePartitionServer {
				st := partitionserver.DefaultConfig().ShutdownTimeout
				for _, a := range c.Args {
					if v, ok := strings.CutPrefix(a, "--shutdown-timeout="); ok {
						d, err := time.ParseDuration(v)
						if err != nil {
							t.Fatal(err)
						}
						st = d
					}
				}
				if st >= bound {
					t.Errorf("--shutdown-timeout %v: the binary exits after %v, so the replicas would not finish closing", st, bound)
				}
			}
		})
	}
}

// TestComposeShutdownFits: docker compose's stop_grace_period (10s unless
// set) covers the binary's shutdown bound and a margin for every service.
func TestComposeShutdownFits(t *testing.T) {
	bound := shutdownBound(t)
	services := mapAt(loadYAML(t, "docker-compose.yml")[0], "services")
	for _, name := range sortedKeys(services) {
		grace := 10 * time.Second
		if v := str(services[name], "stop_grace_period"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("%s: stop_grace_period %q: %v", name, v, err)
			}
			grace = d
		}
		if grace < bound+graceMargin {
			t.Errorf("%s: stop_grace_period %v < shutdown bound %v + margin %v: Docker would SIGKILL a shutdown the binary still runs", name, grace, bound, graceMargin)
		}
	}
}

// TestManifestDisruptionPolicy: every workload has a PodDisruptionBudget,
// and the Raft roles keep the default unhealthy-pod eviction policy. A
// partition server is unready while no master accepts its heartbeats and a
// master while its group has no leader, so in a control-plane outage every
// pod of the role is unready; AlwaysAllow would then let one node drain
// evict all of them.
func TestManifestDisruptionPolicy(t *testing.T) {
	to := loadTyped(t)
	var pdbs []*policyv1.PodDisruptionBudget
	for _, r := range to.kust.Resources {
		for _, o := range decodeStrict(t, k8sDir+"/"+r) {
			if p, ok := o.(*policyv1.PodDisruptionBudget); ok {
				pdbs = append(pdbs, p)
			}
		}
	}
	for _, w := range to.workloads() {
		t.Run(w.name, func(t *testing.T) {
			var mine []*policyv1.PodDisruptionBudget
			for _, p := range pdbs {
				sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				if sel.Matches(k8slabels.Set(w.tmpl.Labels)) {
					mine = append(mine, p)
				}
			}
			if len(mine) != 1 {
				t.Fatalf("%d PodDisruptionBudgets select the pods, want 1", len(mine))
			}
			p := mine[0]
			if strings.HasPrefix(w.name, "StatefulSet/") && p.Spec.UnhealthyPodEvictionPolicy != nil &&
				*p.Spec.UnhealthyPodEvictionPolicy == policyv1.AlwaysAllow {
				t.Errorf("PodDisruptionBudget %s: unhealthyPodEvictionPolicy AlwaysAllow would let a drain evict every pod of a Raft role while all are unready", p.Name)
			}
		})
	}
}

// TestManifestPodSecurity: every pod runs as the image's non-root user
// with a read-only root file system, no privilege escalation or
// capabilities, the runtime's seccomp profile, no service-account token
// (the roles call no Kubernetes API) and no Service environment variables;
// pods with volumes to write own them through fsGroup.
func TestManifestPodSecurity(t *testing.T) {
	uid, gid := dockerfileUser(t)
	to := loadTyped(t)
	for _, w := range to.workloads() {
		t.Run(w.name, func(t *testing.T) {
			spec := w.tmpl.Spec
			psc := spec.SecurityContext
			if psc == nil {
				t.Fatal("no pod securityContext")
			}
			if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
				t.Error("runAsNonRoot is not true")
			}
			if psc.RunAsUser == nil || *psc.RunAsUser != uid || psc.RunAsGroup == nil || *psc.RunAsGroup != gid {
				t.Errorf("runAsUser/runAsGroup %s/%s, want the Dockerfile's USER %d:%d (the owner of the image's /data)", ptrText(psc.RunAsUser), ptrText(psc.RunAsGroup), uid, gid)
			}
			if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Error("seccompProfile is not RuntimeDefault")
			}
			if strings.HasPrefix(w.name, "StatefulSet/") && (psc.FSGroup == nil || *psc.FSGroup != gid) {
				t.Errorf("fsGroup %s, want %d: the PVC must be writable by the process", ptrText(psc.FSGroup), gid)
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("automountServiceAccountToken is not false (the roles call no Kubernetes API)")
			}
			if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
				t.Error("enableServiceLinks is not false")
			}
			for _, c := range spec.Containers {
				sc := c.SecurityContext
				if sc == nil {
					t.Fatalf("container %s: no securityContext", c.Name)
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
				}
				if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
					t.Errorf("container %s: capabilities %+v, want drop [ALL] and nothing added", c.Name, sc.Capabilities)
				}
			}
		})
	}
}

// ptrText prints an optional number.
func ptrText(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}

// dockerfileUser is the numeric USER of the Dockerfile's runtime stage.
func dockerfileUser(t *testing.T) (uid, gid int64) {
	t.Helper()
	ms := regexp.MustCompile(`(?m)^USER (\d+):(\d+)\s*$`).FindAllStringSubmatch(readFile(t, "Dockerfile"), -1)
	if len(ms) == 0 {
		t.Fatal("Dockerfile: no numeric USER uid:gid (runAsNonRoot needs a numeric user to verify)")
	}
	m := ms[len(ms)-1]
	uid, _ = strconv.ParseInt(m[1], 10, 64)
	gid, _ = strconv.ParseInt(m[2], 10, 64)
	return uid, gid
}

// TestManifestProbeSemantics: the probe paths are the ones the binary
// serves (internal/health.Mount, which cmd/tablestore mounts on the metrics
// listener of every role), and liveness and startup answer 200 while the
// role is not ready: a partition server catching up or a master without a
// quorum is unready (no traffic, rollouts wait) but is never restarted for
// it. Readiness answers 503 then, 200 once ready.
func TestManifestProbeSemantics(t *testing.T) {
	to := loadTyped(t)
	verdict := health.Verdict{Reasons: []string{"3 of 9 replicas catching up"}}
	mux := http.NewServeMux()
	health.Mount(mux, func() health.Verdict { return verdict })
	get := func(path string) int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	for _, w := range to.workloads() {
		t.Run(w.name, func(t *testing.T) {
			c := w.tmpl.Spec.Containers[0]
			for _, p := range []struct {
				name    string
				probe   *corev1.Probe
				unready int // status while the role is not ready
				ready   int
			}{
				{"startupProbe", c.StartupProbe, http.StatusOK, http.StatusOK},
				{"livenessProbe", c.LivenessProbe, http.StatusOK, http.StatusOK},
				{"readinessProbe", c.ReadinessProbe, http.StatusServiceUnavailable, http.StatusOK},
			} {
				if p.probe == nil || p.probe.HTTPGet == nil {
					t.Errorf("%s: want an httpGet probe", p.name)
					continue
				}
				path := p.probe.HTTPGet.Path
				verdict = health.Verdict{Reasons: []string{"not ready"}}
				if got := get(path); got != p.unready {
					t.Errorf("%s GET %s answers %d while the role is not ready, want %d", p.name, path, got, p.unready)
				}
				verdict = health.Verdict{}
				if got := get(path); got != p.ready {
					t.Errorf("%s GET %s answers %d when ready, want %d", p.name, path, got, p.ready)
				}
			}
		})
	}
}

// TestDocsReplaceMasterPatch: docs/deploy.md's "Replace a master" on
// Kubernetes patches the masters' StatefulSet by position: args item N
// becomes --join. That item must be the --peers flag (a master refuses
// --join beside --peers, and replacing another flag would drop it), the
// container index must be the master's, and master.yaml must name
// updateStrategy RollingUpdate, or the closing `kubectl apply -k` would
// leave the StatefulSet on OnDelete.
func TestDocsReplaceMasterPatch(t *testing.T) {
	doc := readFile(t, "../docs/deploy.md")
	re := regexp.MustCompile(`"path":"/spec/template/spec/containers/(\d+)/args/(\d+)","value":"([^"]*)"`)
	ms := re.FindAllStringSubmatch(doc, -1)
	if len(ms) != 1 {
		t.Fatalf("docs/deploy.md: %d args patches, want the one of \"Replace a master\"", len(ms))
	}
	if !strings.Contains(doc, "patch statefulset tablestore-master --type=json") ||
		!strings.Contains(doc, `{"op":"replace","path":"/spec/updateStrategy","value":{"type":"OnDelete"}}`) {
		t.Error("docs/deploy.md: the patch must target statefulset tablestore-master and switch it to OnDelete")
	}
	ci, _ := strconv.Atoi(ms[0][1])
	ai, _ := strconv.Atoi(ms[0][2])
	if ms[0][3] != "--join" {
		t.Errorf("the patch sets %q, want --join", ms[0][3])
	}
	to := loadTyped(t)
	for _, s := range to.statefulSets {
		if s.Name != "tablestore-master" {
			continue
		}
		cs := s.Spec.Template.Spec.Containers
		if ci >= len(cs) || ai >= len(cs[ci].Args) {
			t.Fatalf("containers/%d/args/%d does not exist in master.yaml", ci, ai)
		}
		if cs[ci].Args[0] != roleMaster || !strings.HasPrefix(cs[ci].Args[ai], "--peers=") {
			t.Errorf("containers/%d/args/%d is %q (role %s), want the master's --peers", ci, ai, cs[ci].Args[ai], cs[ci].Args[0])
		}
		if s.Spec.UpdateStrategy.Type != "RollingUpdate" {
			t.Errorf("master.yaml updateStrategy %q: name RollingUpdate so that apply -k undoes the procedure's OnDelete", s.Spec.UpdateStrategy.Type)
		}
		return
	}
	t.Fatal("no StatefulSet tablestore-master")
}

// TestDocsCtlCommands: every `tablestore ctl` command in docs/deploy.md's
// shell blocks (scale-in, replacing a master, operator commands) is one the
// binary's ctl accepts: each is run against an address where no master
// listens, so a command line ctl understands fails only on the connection,
// and a misspelt command, a missing argument or an unknown flag fails on
// usage before that.
func TestDocsCtlCommands(t *testing.T) {
	doc := readFile(t, "../docs/deploy.md")
	fence := regexp.MustCompile("(?s)```sh\n(.*?)```")
	ctlRE := regexp.MustCompile(`(?:^|[\s/])tablestore ctl (.*)$`)
	placeholder := regexp.MustCompile(`<[^>]*>`)
	vars := strings.NewReplacer("$M", "127.0.0.1:1", "$LOST", "tablestore-master-2", "$OK", "tablestore-master-0", "$F", "127.0.0.1:2,")
	var cmds [][]string
	for _, block := range fence.FindAllStringSubmatch(doc, -1) {
		for _, line := range strings.Split(block[1], "\n") {
			m := ctlRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			text, _, _ := strings.Cut(m[1], " #")
			text, _, _ = strings.Cut(text, " > ") // the shell's redirection
			text = vars.Replace(placeholder.ReplaceAllString(text, "x:7100"))
			if strings.Contains(text, "--follow") {
				continue // runs until interrupted
			}
			args := []string{"ctl", "--master=127.0.0.1:1", "--timeout=300ms"}
			fields := strings.Fields(text)
			for i := 0; i < len(fields); i++ {
				switch f := fields[i]; {
				case strings.HasPrefix(f, "--master="):
				case f == "--master":
					i++
				default:
					args = append(args, f)
				}
			}
			cmds = append(cmds, args)
		}
	}
	// The operator commands, scale-in and both master replacements.
	if len(cmds) < 10 {
		t.Fatalf("found %d ctl commands in docs/deploy.md, want at least 10 (did the extraction break?)", len(cmds))
	}
	usage := regexp.MustCompile(`usage|unknown command|flag provided but not defined|invalid value`)
	for _, args := range cmds {
		t.Run(strings.Join(args[3:], " "), func(t *testing.T) {
			t.Parallel()
			out := runBinary(t, args...)
			if usage.MatchString(out) || !strings.Contains(out, "no master leader") {
				t.Errorf("tablestore %s: ctl does not accept this command line:\n%s", strings.Join(args, " "), firstLines(out, 4))
			}
		})
	}
}
