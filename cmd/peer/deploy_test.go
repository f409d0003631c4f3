package main

// The container and cluster recipes (Dockerfile, deploy/compose,
// deploy/k8s) are checked against the binary they run: every file parses,
// every flag and SUPERPEER_* variable they give is one that `peer run` (or
// `peer id`) has, with a value it takes, and the names and ports agree
// between the StatefulSet, the headless Service, the Prometheus annotations
// and the bootstrap multiaddrs. Nothing here starts a peer or touches the
// network.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"go.yaml.in/yaml/v3"
)

// repoRoot is the repository's root, from cmd/peer.
const repoRoot = "../.."

// commandFlags is the flag names of `peer CMD`, read from its -h.
func commandFlags(t *testing.T, cmd string) map[string]bool {
	t.Helper()
	var usage bytes.Buffer
	if code := run([]string{cmd, "-h"}, io.Discard, &usage); code != 0 {
		t.Fatalf("peer %s -h: exit %d", cmd, code)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9][a-z0-9-]*)`).FindAllStringSubmatch(usage.String(), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("peer %s -h lists no flags:\n%s", cmd, usage.String())
	}
	return flags
}

// recipeFlags is the flags of the subcommands the recipes run.
type recipeFlags map[string]map[string]bool

func loadRecipeFlags(t *testing.T) recipeFlags {
	return recipeFlags{"run": commandFlags(t, "run"), "id": commandFlags(t, "id")}
}

// checkArgv checks a `peer` command line (without the program name, or
// with it as /peer or peer): a known subcommand, then only its flags.
func (rf recipeFlags) checkArgv(t *testing.T, where string, argv []string) {
	t.Helper()
	if len(argv) > 0 && (argv[0] == "/peer" || argv[0] == "peer" || strings.HasSuffix(argv[0], "/peer")) {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		t.Errorf("%s: no subcommand", where)
		return
	}
	flags, ok := rf[argv[0]]
	if !ok {
		t.Errorf("%s: peer %s is not a subcommand the recipes may run", where, argv[0])
		return
	}
	for _, a := range argv[1:] {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			t.Errorf("%s: peer %s has no flag --%s", where, argv[0], name)
		}
	}
}

// checkEnvNames checks that every SUPERPEER_* variable is a `peer run`
// flag's.
func (rf recipeFlags) checkEnvNames(t *testing.T, where string, env map[string]string) {
	t.Helper()
	byVar := map[string]string{}
	for f := range rf["run"] {
		byVar[envName(f)] = f
	}
	for k := range env {
		if strings.HasPrefix(k, envPrefix) && byVar[k] == "" {
			t.Errorf("%s: %s is no `peer run` flag's variable", where, k)
		}
	}
}

// checkEnvValues runs `peer run` with env (and the process's environment
// cleared of SUPERPEER_*) and a --ttl below its minimum: flags, variables,
// listen and bootstrap multiaddrs and every check before --ttl's pass, and
// it stops there, before any host starts. With repel a second run passes
// every check but the last, repel's own minimum --ttl.
func checkEnvValues(t *testing.T, where string, env map[string]string, args ...string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix) {
			t.Setenv(k, "")
		}
	}
	for k, v := range env {
		if strings.HasPrefix(k, envPrefix) {
			t.Setenv(k, v)
		}
	}
	stopAt := map[string]string{"1ns": "--ttl 1ns is below 100ms"}
	if env[envName("method")] == "repel" || strings.Contains(strings.Join(args, " "), "repel") {
		// The last check of all, repel's own bound on --ttl.
		stopAt["1s"] = "--ttl 1s: with --method repel it must be at least"
	}
	for ttl, want := range stopAt {
		var stderr bytes.Buffer
		code := run(append(append([]string{"run"}, args...), "--ttl", ttl), io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: `peer run` with its variables and --ttl %s: exit %d, %s (want only the error %q)", where, ttl, code, strings.TrimSpace(stderr.String()), want)
		}
	}
}

// hostPort is the port of an address as --http and --metrics take it.
func hostPort(t *testing.T, where, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Errorf("%s: %q is no host:port", where, addr)
	}
	return n
}

// listenPorts is the TCP and UDP ports of a --listen list.
func listenPorts(t *testing.T, where, list string) (tcp, udp []int) {
	t.Helper()
	var l listFlag
	_ = l.Set(list)
	for _, s := range l {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			t.Errorf("%s: listen %q: %v", where, s, err)
			continue
		}
		if p, err := a.ValueForProtocol(ma.P_TCP); err == nil {
			n, _ := strconv.Atoi(p)
			tcp = append(tcp, n)
		}
		if p, err := a.ValueForProtocol(ma.P_UDP); err == nil {
			n, _ := strconv.Atoi(p)
			udp = append(udp, n)
		}
	}
	return tcp, udp
}

// dnsBootstrap is one /dns4/HOST/tcp/PORT/p2p/ID bootstrap multiaddr.
type dnsBootstrap struct {
	host string
	port int
	id   peer.ID
}

func parseDNSBootstraps(t *testing.T, where, list string) []dnsBootstrap {
	t.Helper()
	var l listFlag
	_ = l.Set(list)
	var out []dnsBootstrap
	for _, s := range l {
		ai, err := peer.AddrInfoFromString(s)
		if err != nil || len(ai.Addrs) != 1 {
			t.Errorf("%s: bootstrap %q: %v", where, s, err)
			continue
		}
		host, err := ai.Addrs[0].ValueForProtocol(ma.P_DNS4)
		if err != nil {
			t.Errorf("%s: bootstrap %q does not name its peer by DNS (/dns4/…)", where, s)
			continue
		}
		p, err := ai.Addrs[0].ValueForProtocol(ma.P_TCP)
		if err != nil {
			t.Errorf("%s: bootstrap %q has no TCP port", where, s)
			continue
		}
		port, _ := strconv.Atoi(p)
		out = append(out, dnsBootstrap{host: host, port: port, id: ai.ID})
	}
	if len(out) == 0 {
		t.Errorf("%s: no bootstrap multiaddr", where)
	}
	return out
}

// yamlDocs is every YAML document under deploy/, by file.
func yamlDocs(t *testing.T) map[string][]map[string]any {
	t.Helper()
	docs := map[string][]map[string]any{}
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		dec := yaml.NewDecoder(f)
		rel, _ := filepath.Rel(repoRoot, path)
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); err == io.EOF {
				break
			} else if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if doc != nil {
				docs[rel] = append(docs[rel], doc)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// at is the value at a path of map keys in a decoded YAML document.
func at(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int, float64, bool:
		return fmt.Sprint(x)
	}
	return ""
}

func list(v any) []any { l, _ := v.([]any); return l }

func strList(v any) []string {
	var out []string
	for _, x := range list(v) {
		out = append(out, str(x))
	}
	return out
}

func toInt(v any) int { n, _ := strconv.Atoi(str(v)); return n }

// k8sObject is the one object of that kind in the manifests.
func k8sObject(t *testing.T, docs map[string][]map[string]any, kind string) map[string]any {
	t.Helper()
	var found []map[string]any
	for file, ds := range docs {
		if !strings.HasPrefix(file, filepath.Join("deploy", "k8s")) {
			continue
		}
		for _, d := range ds {
			if str(d["kind"]) == kind {
				found = append(found, d)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("deploy/k8s: %d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

// expandK8s expands $(VAR) in a container's env value as Kubernetes does,
// from the variables before it.
func expandK8s(s string, vars map[string]string) string {
	return regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func TestDeploy_YAMLParses(t *testing.T) {
	docs := yamlDocs(t)
	var files []string
	for f := range docs {
		files = append(files, filepath.ToSlash(f))
	}
	sort.Strings(files)
	want := []string{"deploy/compose/compose.yaml", "deploy/compose/prometheus.yml", "deploy/k8s/configmap.yaml",
		"deploy/k8s/kustomization.yaml", "deploy/k8s/namespace.yaml", "deploy/k8s/service.yaml", "deploy/k8s/statefulset.yaml"}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Errorf("YAML files under deploy/: %v, want %v", files, want)
	}
	for file, ds := range docs {
		if !strings.HasPrefix(file, filepath.Join("deploy", "k8s")) {
			continue
		}
		for _, d := range ds {
			if str(d["apiVersion"]) == "" || str(d["kind"]) == "" {
				t.Errorf("%s: a document without apiVersion and kind", file)
			}
			if str(d["kind"]) != "Kustomization" && str(at(d, "metadata", "name")) == "" {
				t.Errorf("%s: a %s without a name", file, d["kind"])
			}
		}
	}
}

func TestDeploy_Kubernetes(t *testing.T) {
	rf := loadRecipeFlags(t)
	docs := yamlDocs(t)
	sts := k8sObject(t, docs, "StatefulSet")
	svc := k8sObject(t, docs, "Service")
	cm := k8sObject(t, docs, "ConfigMap")
	kust := k8sObject(t, docs, "Kustomization")
	ns := str(at(k8sObject(t, docs, "Namespace"), "metadata", "name"))

	// Every object in the one namespace, which kustomize also sets, and
	// every file in kustomization.yaml's resources.
	for _, o := range []map[string]any{sts, svc, cm} {
		if got := str(at(o, "metadata", "namespace")); got != ns {
			t.Errorf("%s %s in namespace %q, want %q", o["kind"], at(o, "metadata", "name"), got, ns)
		}
	}
	if str(kust["namespace"]) != ns {
		t.Errorf("kustomization namespace %q, want %q", kust["namespace"], ns)
	}
	var inKust []string
	for _, r := range strList(kust["resources"]) {
		inKust = append(inKust, filepath.Join("deploy", "k8s", r))
	}
	for file := range docs {
		if strings.HasPrefix(file, filepath.Join("deploy", "k8s")) && !strings.HasSuffix(file, "kustomization.yaml") && !contains(inKust, file) {
			t.Errorf("%s is not among kustomization.yaml's resources", file)
		}
	}

	// The headless Service is the StatefulSet's and selects its pods.
	stsName, svcName := str(at(sts, "metadata", "name")), str(at(svc, "metadata", "name"))
	if str(at(svc, "spec", "clusterIP")) != "None" {
		t.Error("the Service is not headless (clusterIP: None)")
	}
	if at(svc, "spec", "publishNotReadyAddresses") != true {
		t.Error("the Service does not publish pods before they are ready: peers starting together could not resolve the bootstrap peers")
	}
	if got := str(at(sts, "spec", "serviceName")); got != svcName {
		t.Errorf("StatefulSet serviceName %q, Service %q", got, svcName)
	}
	podLabels, _ := at(sts, "spec", "template", "metadata", "labels").(map[string]any)
	for _, sel := range []map[string]any{mapAt(svc, "spec", "selector"), mapAt(sts, "spec", "selector", "matchLabels")} {
		if len(sel) == 0 {
			t.Error("an empty selector")
		}
		for k, v := range sel {
			if str(podLabels[k]) != str(v) {
				t.Errorf("selector %s=%v does not select the pod template (labels %v)", k, v, podLabels)
			}
		}
	}

	// The container runs `peer run` with real flags and variables.
	containers := list(at(sts, "spec", "template", "spec", "containers"))
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	c := containers[0]
	argv := append(strList(at(c, "command")), strList(at(c, "args"))...)
	rf.checkArgv(t, "statefulset args", argv)
	env := map[string]string{}
	for k, v := range mapAt(cm, "data") {
		env[k] = str(v)
	}
	refs := list(at(c, "envFrom"))
	if len(refs) != 1 || str(at(refs[0], "configMapRef", "name")) != str(at(cm, "metadata", "name")) {
		t.Errorf("the container does not load ConfigMap %s: envFrom %v", at(cm, "metadata", "name"), refs)
	}
	// Pod 0's environment, $(POD_NAME) expanded as the kubelet does.
	pod0 := stsName + "-0"
	for _, e := range list(at(c, "env")) {
		name := str(at(e, "name"))
		switch {
		case at(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name":
			env[name] = pod0
		case at(e, "valueFrom") != nil:
			env[name] = "from-" + name
		default:
			env[name] = expandK8s(str(at(e, "value")), env)
		}
	}
	rf.checkEnvNames(t, "statefulset env", env)
	checkEnvValues(t, "statefulset env of "+pod0, env, argv[1:]...)
	seedOf := func(pod string) string {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		e["POD_NAME"] = pod
		for _, x := range list(at(c, "env")) {
			if str(at(x, "name")) == "SUPERPEER_IDENTITY_SEED" {
				return expandK8s(str(at(x, "value")), e)
			}
		}
		t.Fatal("the pods have no SUPERPEER_IDENTITY_SEED: the bootstrap peers' IDs cannot be known ahead")
		return ""
	}
	if seedOf(pod0) == seedOf(stsName+"-1") {
		t.Error("every pod gets the same identity seed")
	}

	// Container ports, by name: the Service's target ports and the ports
	// the peer's own flags open.
	cports := map[string][2]string{} // name: port, protocol
	for _, p := range list(at(c, "ports")) {
		proto := str(at(p, "protocol"))
		if proto == "" {
			proto = "TCP"
		}
		cports[str(at(p, "name"))] = [2]string{str(at(p, "containerPort")), proto}
	}
	for _, p := range list(at(svc, "spec", "ports")) {
		target, proto := str(at(p, "targetPort")), str(at(p, "protocol"))
		if proto == "" {
			proto = "TCP"
		}
		cp, ok := cports[target]
		if !ok {
			if cp, ok = cports[str(at(p, "name"))]; !ok || cp[0] != target {
				t.Errorf("Service port %v targets %q, which no container port is", at(p, "name"), target)
				continue
			}
		}
		if cp[1] != proto || cp[0] != str(at(p, "port")) {
			t.Errorf("Service port %v is %v/%s, container port %s/%s", at(p, "name"), at(p, "port"), proto, cp[0], cp[1])
		}
	}
	want := func(what string, port int, name, proto string) {
		t.Helper()
		if cp, ok := cports[name]; !ok || cp[0] != strconv.Itoa(port) || cp[1] != proto {
			t.Errorf("%s listens on %d/%s, container port %q is %v", what, port, proto, name, cp)
		}
	}
	tcp, udp := listenPorts(t, "SUPERPEER_LISTEN", env["SUPERPEER_LISTEN"])
	if len(tcp) != 1 || len(udp) != 1 {
		t.Fatalf("SUPERPEER_LISTEN %q: want one TCP and one QUIC address", env["SUPERPEER_LISTEN"])
	}
	want("--listen (TCP)", tcp[0], "p2p-tcp", "TCP")
	want("--listen (QUIC)", udp[0], "p2p-quic", "UDP")
	httpPort := hostPort(t, "SUPERPEER_HTTP", env["SUPERPEER_HTTP"])
	metricsPort := hostPort(t, "SUPERPEER_METRICS", env["SUPERPEER_METRICS"])
	want("--http", httpPort, "http", "TCP")
	want("--metrics", metricsPort, "metrics", "TCP")

	// Prometheus annotations at the metrics port and path.
	ann := mapAt(sts, "spec", "template", "metadata", "annotations")
	if str(ann["prometheus.io/scrape"]) != "true" || str(ann["prometheus.io/port"]) != strconv.Itoa(metricsPort) || str(ann["prometheus.io/path"]) != metricsPath {
		t.Errorf("prometheus.io annotations %v, want scrape true, port %d, path %s", ann, metricsPort, metricsPath)
	}
	// The readiness probe asks the status server.
	probe := at(c, "readinessProbe", "httpGet")
	if str(at(probe, "path")) != "/status" || (str(at(probe, "port")) != "http" && toInt(at(probe, "port")) != httpPort) {
		t.Errorf("readinessProbe %v, want /status on the http port", probe)
	}
	if at(c, "resources", "requests") == nil || at(c, "resources", "limits") == nil {
		t.Error("no resource requests and limits")
	}
	uid := at(sts, "spec", "template", "spec", "securityContext", "runAsUser")
	if at(sts, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true || toInt(uid) == 0 {
		t.Errorf("the pods may run as root (runAsUser %v)", uid)
	}

	// The bootstrap peers: the first pods by their stable DNS names, at the
	// TCP port, with the IDs their seeds give.
	replicas := toInt(at(sts, "spec", "replicas"))
	boots := parseDNSBootstraps(t, "SUPERPEER_BOOTSTRAP", env["SUPERPEER_BOOTSTRAP"])
	for _, b := range boots {
		re := regexp.MustCompile("^" + regexp.QuoteMeta(stsName) + `-(\d+)\.` + regexp.QuoteMeta(svcName+"."+ns+".svc.cluster.local") + "$")
		m := re.FindStringSubmatch(b.host)
		if m == nil {
			t.Errorf("bootstrap host %s is not %s-<i>.%s.%s.svc.cluster.local", b.host, stsName, svcName, ns)
			continue
		}
		if i, _ := strconv.Atoi(m[1]); i >= replicas {
			t.Errorf("bootstrap peer %s: the StatefulSet has %d replicas", b.host, replicas)
		}
		if b.port != tcp[0] {
			t.Errorf("bootstrap peer %s at port %d, the peers listen on %d", b.host, b.port, tcp[0])
		}
		pod := stsName + "-" + m[1]
		if id := seedID(t, seedOf(pod)); id != b.id {
			t.Errorf("bootstrap peer %s has ID %s in the manifest, but its seed %q gives %s", pod, b.id, seedOf(pod), id)
		}
	}
}

func TestDeploy_Compose(t *testing.T) {
	rf := loadRecipeFlags(t)
	docs := yamlDocs(t)
	cf := docs[filepath.Join("deploy", "compose", "compose.yaml")]
	if len(cf) != 1 {
		t.Fatalf("deploy/compose/compose.yaml: %d documents", len(cf))
	}
	services := mapAt(cf[0], "services")
	peerServices := 0
	var bootSeed, metricsPort string
	var boots []dnsBootstrap
	var peerNames []string
	for name, s := range services {
		where := "compose service " + name
		env := map[string]string{}
		for k, v := range mapAt(s, "environment") {
			env[k] = expandCompose(str(v))
		}
		if !strings.HasPrefix(str(at(s, "image")), "superpeer/") {
			continue
		}
		peerServices++
		peerNames = append(peerNames, name)
		argv := strList(at(s, "command"))
		rf.checkArgv(t, where+" command", argv)
		rf.checkEnvNames(t, where, env)
		checkEnvValues(t, where, env, argv[1:]...)
		if at(s, "build", "target") != "netem" || !contains(strList(at(s, "cap_add")), "NET_ADMIN") || env["NETEM"] == "" {
			t.Errorf("%s: not the netem image with NET_ADMIN and a NETEM delay", where)
		}
		if seed := env["SUPERPEER_IDENTITY_SEED"]; seed != "" {
			bootSeed = seed
			// Its published ports are the ones its flags open.
			var published []string
			for _, p := range strList(at(s, "ports")) {
				parts := strings.Split(p, ":")
				published = append(published, parts[len(parts)-1])
			}
			for _, v := range []string{"SUPERPEER_HTTP", "SUPERPEER_METRICS"} {
				if p := strconv.Itoa(hostPort(t, where+" "+v, env[v])); !contains(published, p) {
					t.Errorf("%s: %s's port %s is not published (%v)", where, v, p, published)
				}
			}
			for _, b := range parseDNSBootstraps(t, where, env["SUPERPEER_BOOTSTRAP"]) {
				if b.host != name {
					t.Errorf("%s: bootstraps through %s, not itself (the seeded peer)", where, b.host)
				}
			}
		}
		boots = append(boots, parseDNSBootstraps(t, where, env["SUPERPEER_BOOTSTRAP"])...)
		metricsPort = strconv.Itoa(hostPort(t, where, env["SUPERPEER_METRICS"]))
		tcp, _ := listenPorts(t, where, env["SUPERPEER_LISTEN"])
		for _, b := range boots {
			if len(tcp) != 1 || b.port != tcp[0] {
				t.Errorf("%s: bootstrap port %d, listening on %v", where, b.port, tcp)
			}
		}
	}
	if peerServices < 2 || bootSeed == "" {
		t.Fatalf("compose: %d peer services, bootstrap seed %q: want a seeded bootstrap peer and others", peerServices, bootSeed)
	}
	for _, b := range boots {
		if _, ok := services[b.host]; !ok {
			t.Errorf("compose: bootstrap host %s is no service", b.host)
		}
		if id := seedID(t, bootSeed); b.id != id {
			t.Errorf("compose: bootstrap ID %s, but seed %q gives %s", b.id, bootSeed, id)
		}
	}

	// Prometheus scrapes every peer service at the metrics port and path.
	prom := docs[filepath.Join("deploy", "compose", "prometheus.yml")]
	if len(prom) != 1 {
		t.Fatal("deploy/compose/prometheus.yml: want one document")
	}
	jobs := list(at(prom[0], "scrape_configs"))
	if len(jobs) != 1 || str(at(jobs[0], "metrics_path")) != metricsPath {
		t.Fatalf("prometheus.yml: want one job at %s, got %v", metricsPath, jobs)
	}
	sd := list(at(jobs[0], "dns_sd_configs"))
	if len(sd) != 1 || str(at(sd[0], "port")) != metricsPort {
		t.Errorf("prometheus.yml: dns_sd_configs %v, want the metrics port %s", sd, metricsPort)
	}
	names := strList(at(sd[0], "names"))
	sort.Strings(names)
	sort.Strings(peerNames)
	if strings.Join(names, ",") != strings.Join(peerNames, ",") {
		t.Errorf("prometheus.yml scrapes %v, the peer services are %v", names, peerNames)
	}
	if vol := strList(at(services["prometheus"], "volumes")); len(vol) != 1 || !strings.HasPrefix(vol[0], "./prometheus.yml:") {
		t.Errorf("the prometheus service does not mount ./prometheus.yml: %v", vol)
	}
}

// expandCompose expands ${VAR:-default} and ${VAR} as compose does with an
// empty environment.
func expandCompose(s string) string {
	return regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(:?-([^}]*))?\}`).ReplaceAllString(s, "$2")
}

// dockerInstr is one Dockerfile instruction.
type dockerInstr struct {
	op, arg string
	stage   int // 0 for the first FROM's stage
}

func parseDockerfile(t *testing.T, path string) []dockerInstr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []dockerInstr
	stage := -1
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trim := strings.TrimSpace(line)
		if cur.Len() == 0 && (trim == "" || strings.HasPrefix(trim, "#")) {
			continue
		}
		if strings.HasPrefix(trim, "#") {
			continue // a comment inside a continued instruction
		}
		if strings.HasSuffix(trim, "\\") {
			cur.WriteString(strings.TrimSuffix(trim, "\\") + " ")
			continue
		}
		cur.WriteString(trim)
		op, arg, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		op = strings.ToUpper(op)
		if op == "FROM" {
			stage++
		}
		out = append(out, dockerInstr{op: op, arg: strings.TrimSpace(arg), stage: stage})
	}
	if cur.Len() > 0 {
		t.Fatalf("%s ends inside a continued line", path)
	}
	return out
}

func TestDeploy_Dockerfile(t *testing.T) {
	rf := loadRecipeFlags(t)
	instrs := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	known := map[string]bool{"FROM": true, "ARG": true, "WORKDIR": true, "COPY": true, "RUN": true, "ENV": true,
		"EXPOSE": true, "ENTRYPOINT": true, "CMD": true, "USER": true, "LABEL": true}
	stages := map[int][]dockerInstr{}
	last := 0
	for _, in := range instrs {
		if !known[in.op] {
			t.Errorf("Dockerfile: unknown instruction %s", in.op)
		}
		stages[in.stage] = append(stages[in.stage], in)
		last = max(last, in.stage)
	}
	if last < 1 {
		t.Fatal("Dockerfile: not a multi-stage build")
	}
	get := func(stage int, op string) []string {
		var args []string
		for _, in := range stages[stage] {
			if in.op == op {
				args = append(args, in.arg)
			}
		}
		return args
	}
	jsonArgv := func(where, s string) []string {
		var argv []string
		if err := json.Unmarshal([]byte(s), &argv); err != nil {
			t.Errorf("Dockerfile: %s %s is not in exec (JSON) form: %v", where, s, err)
		}
		return argv
	}
	// The build stage: a static, trimmed binary, run once to prove it.
	var built bool
	for _, r := range get(0, "RUN") {
		if strings.Contains(r, "go build") {
			built = true
			for _, w := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w"`, "./cmd/peer"} {
				if !strings.Contains(r, w) {
					t.Errorf("Dockerfile: the go build lacks %s: %s", w, r)
				}
			}
		}
		for _, cmd := range strings.Split(r, "&&") {
			if f := strings.Fields(cmd); len(f) > 0 && strings.HasSuffix(f[0], "/peer") {
				rf.checkArgv(t, "Dockerfile RUN", f[:slicesIndexOr(f, ">/dev/null")])
			}
		}
	}
	if !built {
		t.Error("Dockerfile: the first stage does not go build")
	}
	// Every stage that runs the peer: flags it has, its ports exposed.
	for stage := 1; stage <= last; stage++ {
		from := get(stage, "FROM")[0]
		cmds := get(stage, "CMD")
		if len(cmds) != 1 {
			t.Errorf("Dockerfile stage %d (%s): %d CMDs", stage, from, len(cmds))
			continue
		}
		argv := jsonArgv("CMD", cmds[0])
		rf.checkArgv(t, "Dockerfile CMD", argv)
		exposed := strings.Join(get(stage, "EXPOSE"), " ")
		for i := 0; i+1 < len(argv); i++ {
			switch argv[i] {
			case "--listen":
				tcp, udp := listenPorts(t, "Dockerfile CMD", argv[i+1])
				for _, p := range tcp {
					if !strings.Contains(exposed, fmt.Sprintf("%d/tcp", p)) {
						t.Errorf("Dockerfile stage %d: listens on %d/tcp, EXPOSE %s", stage, p, exposed)
					}
				}
				for _, p := range udp {
					if !strings.Contains(exposed, fmt.Sprintf("%d/udp", p)) {
						t.Errorf("Dockerfile stage %d: listens on %d/udp, EXPOSE %s", stage, p, exposed)
					}
				}
			case "--http", "--metrics":
				if p := hostPort(t, "Dockerfile CMD", argv[i+1]); !strings.Contains(exposed, fmt.Sprintf("%d/tcp", p)) {
					t.Errorf("Dockerfile stage %d: %s on %d, EXPOSE %s", stage, argv[i], p, exposed)
				}
			}
		}
		eps := get(stage, "ENTRYPOINT")
		if len(eps) != 1 {
			t.Fatalf("Dockerfile stage %d: %d ENTRYPOINTs", stage, len(eps))
		}
		ep := jsonArgv("ENTRYPOINT", eps[0])
		if stage == last {
			// The default target: scratch, non-root, the binary itself.
			if from != "scratch" {
				t.Errorf("Dockerfile: the final stage is FROM %s, want scratch", from)
			}
			if u := get(stage, "USER"); len(u) != 1 || u[0] != "65532:65532" {
				t.Errorf("Dockerfile: the final stage's USER is %v, want 65532:65532", u)
			}
			if len(ep) != 1 || ep[0] != "/peer" {
				t.Errorf(`Dockerfile: ENTRYPOINT %v, want ["/peer"]`, ep)
			}
			continue
		}
		// The netem stage: a shell script that drops to 65532 before the
		// peer; at least it must parse.
		if len(ep) < 3 || ep[0] != "/bin/sh" || ep[1] != "-c" || !strings.Contains(ep[2], "setpriv --reuid=65532 --regid=65532") || !strings.Contains(ep[2], "/peer \"$@\"") {
			t.Errorf("Dockerfile stage %d: ENTRYPOINT %v does not run /peer as 65532 from a shell", stage, ep)
			continue
		}
		if sh, err := exec.LookPath("sh"); err == nil {
			if out, err := exec.Command(sh, "-n", "-c", ep[2]).CombinedOutput(); err != nil {
				t.Errorf("Dockerfile stage %d: the ENTRYPOINT script does not parse: %v %s", stage, err, out)
			}
		}
	}

	// .dockerignore keeps out what the image does not need, and nothing
	// the build does.
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		p := strings.TrimPrefix(strings.TrimSpace(line), "/")
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		for _, need := range []string{"go.mod", "go.sum", "cmd", "dht", "superpeer", "repel", "vivaldi", "experiments", "internal"} {
			if ok, _ := filepath.Match(p, need); ok {
				t.Errorf(".dockerignore %q leaves %s out of the build", p, need)
			}
		}
	}
}

func slicesIndexOr(f []string, s string) int {
	for i, x := range f {
		if x == s {
			return i
		}
	}
	return len(f)
}

func mapAt(v any, path ...string) map[string]any {
	m, _ := at(v, path...).(map[string]any)
	return m
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
