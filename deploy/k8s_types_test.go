package deploy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomize's Kustomization the manifests use
// (kustomize's Go types are not a Kubernetes API module).
type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string   `json:"namespace,omitempty"`
	Resources       []string `json:"resources"`
	Images          []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// The Prometheus Operator's CRDs, as far as the manifests use them.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ruleFile `json:"spec"`
}

// ruleFile is a Prometheus rule file (and a PrometheusRule's spec).
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// typedObjects are every manifest decoded strictly into its API type.
type typedObjects struct {
	kust         kustomization
	services     []*corev1.Service
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	secrets      []*corev1.Secret
	sources      map[string]string // file → text
}

// newFor returns an empty object of the API type for kind.
func newFor(kind string) any {
	switch kind {
	case "Namespace":
		return &corev1.Namespace{}
	case "Secret":
		return &corev1.Secret{}
	case "Service":
		return &corev1.Service{}
	case "StatefulSet":
		return &appsv1.StatefulSet{}
	case "Deployment":
		return &appsv1.Deployment{}
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "Kustomization":
		return &kustomization{}
	case "ServiceMonitor":
		return &serviceMonitor{}
	case "PrometheusRule":
		return &prometheusRule{}
	}
	return nil
}

// decodeStrict decodes every document of path into its API type, failing on
// unknown or duplicate fields and on kinds the test does not know.
func decodeStrict(t *testing.T, path string) []any {
	t.Helper()
	var out []any
	for i, doc := range yamlDocs(readFile(t, path)) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s document %d: %v", path, i+1, err)
		}
		obj := newFor(tm.Kind)
		if obj == nil {
			t.Fatalf("%s document %d: kind %q has no API type in this test", path, i+1, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", path, i+1, tm.Kind, err)
		}
		out = append(out, obj)
	}
	return out
}

func loadTyped(t *testing.T) typedObjects {
	t.Helper()
	var to typedObjects
	to.sources = map[string]string{}
	ks := decodeStrict(t, filepath.Join(k8sDir, "kustomization.yaml"))
	to.kust = *ks[0].(*kustomization)
	for _, r := range to.kust.Resources {
		to.sources[r] = readFile(t, filepath.Join(k8sDir, r))
		for _, o := range decodeStrict(t, filepath.Join(k8sDir, r)) {
			switch x := o.(type) {
			case *corev1.Service:
				to.services = append(to.services, x)
			case *appsv1.StatefulSet:
				to.statefulSets = append(to.statefulSets, x)
			case *appsv1.Deployment:
				to.deployments = append(to.deployments, x)
			case *autoscalingv2.HorizontalPodAutoscaler:
				to.hpas = append(to.hpas, x)
			case *corev1.Secret:
				to.secrets = append(to.secrets, x)
			}
		}
	}
	return to
}

// TestManifestsDecodeStrictly decodes every manifest of deploy/kubernetes
// and deploy/kubernetes/monitoring with the Kubernetes API types.
func TestManifestsDecodeStrictly(t *testing.T) {
	for _, dir := range []string{k8sDir, filepath.Join(k8sDir, "monitoring")} {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no manifests (%v)", dir, err)
		}
		for _, f := range files {
			t.Run(f, func(t *testing.T) {
				if len(decodeStrict(t, f)) == 0 {
					t.Fatal("no documents")
				}
			})
		}
	}
}

type podWorkload struct {
	name string
	tmpl corev1.PodTemplateSpec
}

func (to typedObjects) workloads() []podWorkload {
	var out []podWorkload
	for _, s := range to.statefulSets {
		out = append(out, podWorkload{s.Kind + "/" + s.Name, s.Spec.Template})
	}
	for _, d := range to.deployments {
		out = append(out, podWorkload{d.Kind + "/" + d.Name, d.Spec.Template})
	}
	return out
}

// TestManifestProbes: every role is probed over HTTP on its metrics
// listener: startup and liveness on /healthz, readiness on /readyz.
func TestManifestProbes(t *testing.T) {
	to := loadTyped(t)
	for _, w := range to.workloads() {
		t.Run(w.name, func(t *testing.T) {
			c := w.tmpl.Spec.Containers[0]
			hasMetricsPort := slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })
			if !hasMetricsPort {
				t.Fatal("no container port named metrics")
			}
			for _, p := range []struct {
				name  string
				probe *corev1.Probe
				path  string
			}{{"startupProbe", c.StartupProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil {
					t.Errorf("%s: want an httpGet probe", p.name)
					continue
				}
				if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "metrics" {
					t.Errorf("%s: GET %s on port %s, want %s on metrics", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path)
				}
			}
			if sp := c.StartupProbe; sp != nil && sp.PeriodSeconds*sp.FailureThreshold < 60 {
				t.Errorf("startupProbe allows %ds, want at least a minute to open the data", sp.PeriodSeconds*sp.FailureThreshold)
			}
		})
	}
}

// TestManifestSpread: no two pods of a Raft role (masters, partition
// servers) share a node, and every role spreads over zones. A topology
// spread over hosts with maxSkew 1 is not enough for the Raft roles: with
// fewer nodes than pods it places two on one node (skew 1 is allowed), so
// one node failure could take two of a range's three replicas or two of the
// three masters. Only required pod anti-affinity refuses that.
func TestManifestSpread(t *testing.T) {
	to := loadTyped(t)
	all := to.workloads()
	for _, w := range all {
		t.Run(w.name, func(t *testing.T) {
			keys := map[string]corev1.TopologySpreadConstraint{}
			for _, c := range w.tmpl.Spec.TopologySpreadConstraints {
				keys[c.TopologyKey] = c
				sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
				if err != nil || !sel.Matches(k8slabels.Set(w.tmpl.Labels)) {
					t.Errorf("%s: selector %v does not match the pods (%v)", c.TopologyKey, c.LabelSelector, err)
				}
			}
			if _, ok := keys["topology.kubernetes.io/zone"]; !ok {
				t.Error("no topologySpreadConstraint over topology.kubernetes.io/zone")
			}
			if !strings.HasPrefix(w.name, "StatefulSet/") {
				if _, ok := keys["kubernetes.io/hostname"]; !ok {
					t.Error("no topologySpreadConstraint over kubernetes.io/hostname")
				}
				return
			}
			if err := requiredHostAntiAffinity(w, all); err != nil {
				t.Errorf("Raft replicas must never share a node: %v", err)
			}
		})
	}
}

// requiredHostAntiAffinity reports why w's pods could share a node with each
// other, or nil: it needs a required pod anti-affinity term over
// kubernetes.io/hostname that selects w's own pods and no other workload's
// (selecting every tablestore pod would keep masters off partition servers'
// nodes too, which no failure domain needs).
func requiredHostAntiAffinity(w podWorkload, all []podWorkload) error {
	aff := w.tmpl.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil {
		return errors.New("no podAntiAffinity")
	}
	for _, term := range aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey != "kubernetes.io/hostname" {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err != nil {
			return err
		}
		if !sel.Matches(k8slabels.Set(w.tmpl.Labels)) {
			return fmt.Errorf("the required term's selector %v does not select the pods", term.LabelSelector)
		}
		for _, o := range all {
			if o.name != w.name && sel.Matches(k8slabels.Set(o.tmpl.Labels)) {
				return fmt.Errorf("the required term's selector %v also selects %s", term.LabelSelector, o.name)
			}
		}
		return nil
	}
	return errors.New("no requiredDuringSchedulingIgnoredDuringExecution term over kubernetes.io/hostname (preferred terms and maxSkew-1 spreads allow sharing)")
}

// TestManifestZone: each partition server names its failure domain with
// --zone, from the pod's copy of its node's topology.kubernetes.io/zone
// label (the downward API reads pod labels, never node labels; Kubernetes
// copies the zone onto the pod at binding where KEP-4742 is on, and the
// variable is empty elsewhere, which leaves the server without a zone).
func TestManifestZone(t *testing.T) {
	to := loadTyped(t)
	found := false
	for _, s := range to.statefulSets {
		for _, c := range s.Spec.Template.Spec.Containers {
			if len(c.Args) == 0 || c.Args[0] != rolePartitionServer {
				continue
			}
			found = true
			if !slices.Contains(c.Args, "--zone=$(TABLESTORE_ZONE)") {
				t.Errorf("%s: args %v, want --zone=$(TABLESTORE_ZONE)", s.Name, c.Args)
			}
			ok := false
			for _, e := range c.Env {
				if e.Name == "TABLESTORE_ZONE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
					e.ValueFrom.FieldRef.FieldPath == "metadata.labels['topology.kubernetes.io/zone']" {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s: no TABLESTORE_ZONE from the pod's topology.kubernetes.io/zone label", s.Name)
			}
		}
	}
	if !found {
		t.Fatal("no partition server StatefulSet")
	}
}

// TestManifestFrontendAutoscaling: an HPA owns the front-end count.
func TestManifestFrontendAutoscaling(t *testing.T) {
	to := loadTyped(t)
	if len(to.deployments) != 1 || len(to.hpas) != 1 {
		t.Fatalf("%d Deployments and %d HorizontalPodAutoscalers, want one of each", len(to.deployments), len(to.hpas))
	}
	d, h := to.deployments[0], to.hpas[0]
	if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != d.Name {
		t.Errorf("HPA targets %s/%s, want Deployment/%s", h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name, d.Name)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas <= *h.Spec.MinReplicas {
		t.Errorf("HPA replicas %v..%d, want at least 2 and room to grow", h.Spec.MinReplicas, h.Spec.MaxReplicas)
	}
	if d.Spec.Replicas != nil {
		t.Error("the Deployment sets replicas, which every apply would reset under the HPA")
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Resources.Requests.Cpu().IsZero() {
			t.Error("no CPU request: the HPA's utilization target needs one")
		}
	}
}

// TestManifestAccountKey: the key reaches the front-end as a file from the
// Secret, never on its command line, and the Secret says it must change.
func TestManifestAccountKey(t *testing.T) {
	to := loadTyped(t)
	d := to.deployments[0]
	c := d.Spec.Template.Spec.Containers[0]
	var keyFile string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--account-key=") {
			t.Errorf("arg %q puts the key on the command line", a)
		}
		if v, ok := strings.CutPrefix(a, "--account-key-file="); ok {
			keyFile = v
		}
	}
	if keyFile == "" {
		t.Fatal("no --account-key-file")
	}
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(keyFile, strings.TrimSuffix(m.MountPath, "/")+"/") {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("--account-key-file=%s is on no volume mount", keyFile)
	}
	var secretName, key string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name && v.Secret != nil {
			secretName = v.Secret.SecretName
			rel := strings.TrimPrefix(keyFile, strings.TrimSuffix(mount.MountPath, "/")+"/")
			key = rel
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
		}
	}
	var secret *corev1.Secret
	for _, s := range to.secrets {
		if s.Name == secretName {
			secret = s
		}
	}
	if secret == nil {
		t.Fatalf("--account-key-file=%s: volume %s is no Secret of the manifests", keyFile, mount.Name)
	}
	if _, ok := secret.StringData[key]; !ok {
		t.Errorf("Secret %s has no key %q", secret.Name, key)
	}
	for file, src := range to.sources {
		if strings.Contains(src, "name: "+secret.Name) && strings.Contains(src, "kind: Secret") && !strings.Contains(src, "MUST CHANGE") {
			t.Errorf("%s: the shipped Secret must say MUST CHANGE (it holds the public emulator key)", file)
		}
	}
}

// TestMonitoringManifests: the ServiceMonitor scrapes the metrics Service,
// and the PrometheusRule holds exactly the rules of monitoring/alerts.yaml.
func TestMonitoringManifests(t *testing.T) {
	to := loadTyped(t)
	mon := filepath.Join(k8sDir, "monitoring")
	var sm *serviceMonitor
	var pr *prometheusRule
	ks := decodeStrict(t, filepath.Join(mon, "kustomization.yaml"))[0].(*kustomization)
	for _, r := range ks.Resources {
		for _, o := range decodeStrict(t, filepath.Join(mon, r)) {
			switch x := o.(type) {
			case *serviceMonitor:
				sm = x
			case *prometheusRule:
				pr = x
			}
		}
	}
	if sm == nil || pr == nil {
		t.Fatal("monitoring/ needs a ServiceMonitor and a PrometheusRule")
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var svc *corev1.Service
	for _, s := range to.services {
		if sel.Matches(k8slabels.Set(s.Labels)) {
			if svc != nil {
				t.Fatalf("ServiceMonitor selects %s and %s", svc.Name, s.Name)
			}
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("ServiceMonitor selects no Service")
	}
	if !slices.Contains(sm.Spec.NamespaceSelector.MatchNames, to.kust.Namespace) {
		t.Errorf("ServiceMonitor namespaces %v lack %s", sm.Spec.NamespaceSelector.MatchNames, to.kust.Namespace)
	}
	for _, ep := range sm.Spec.Endpoints {
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
			t.Errorf("endpoint port %q is not a port of Service %s", ep.Port, svc.Name)
		}
		if ep.Path != "/metrics" {
			t.Errorf("endpoint path %q", ep.Path)
		}
	}
	// Every workload's pods are behind the metrics Service.
	svcSel := k8slabels.SelectorFromSet(svc.Spec.Selector)
	for _, w := range to.workloads() {
		if !svcSel.Matches(k8slabels.Set(w.tmpl.Labels)) {
			t.Errorf("Service %s does not select %s", svc.Name, w.name)
		}
	}
	var file ruleFile
	b, err := os.ReadFile(filepath.Join("monitoring", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &file); err != nil {
		t.Fatalf("monitoring/alerts.yaml: %v", err)
	}
	if !reflect.DeepEqual(file, pr.Spec) {
		t.Error("the PrometheusRule's groups differ from monitoring/alerts.yaml: copy the file's groups into its spec")
	}
}
