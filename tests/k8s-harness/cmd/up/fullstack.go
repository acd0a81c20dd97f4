// The full-stack tier (`up --full-stack`): on top of etcd + kube-apiserver, kube-scheduler,
// kube-controller-manager, every Karpenter CRD (wait Established), KWOK with the stages of its
// module, Karpenter's KWOK cloud provider, and the fixtures of Karpenter's E2E suite (the
// KWOKNodeClass and the default NodePool). Upstream files are read from the Go module cache at
// run time, never copied.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

const kwokModule = "sigs.k8s.io/kwok@v0.8.0"

// kwokctl's default stage set, relative to the KWOK module dir.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// The full-stack components' endpoints, added to the ready file.
type fullStackInfo struct {
	SchedulerPort         int               `json:"schedulerPort"`
	ControllerManagerPort int               `json:"controllerManagerPort"`
	KwokServer            string            `json:"kwokServer"`
	KarpenterMetrics      string            `json:"karpenterMetrics"`
	KarpenterHealth       string            `json:"karpenterHealth"`
	KarpenterDir          string            `json:"karpenterDir"`
	KwokDir               string            `json:"kwokDir"`
	Logs                  map[string]string `json:"logs"`
	StartupSeconds        map[string]string `json:"startupSeconds"`
}

type fullStackOptions struct {
	karpenterDir, kwokDir string
	karpenterLogLevel     string
	schedulerVerbosity    int
}

// moduleDir is the module cache dir of mod (`go mod download -json`, run outside any module so
// that no go.mod/go.sum is touched; works offline once build.sh has downloaded it).
func moduleDir(ctx context.Context, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", mod, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", err
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %q", mod, m.Error)
	}
	return m.Dir, nil
}

// startFullStack starts the components after the apiserver is ready, in the guide's order.
// Children are appended to the global list, so stopChildren stops them in reverse.
func startFullStack(ctx context.Context, info *readyInfo, binDir string, opts fullStackOptions) (*fullStackInfo, error) {
	dir := info.Dir
	fs := &fullStackInfo{Logs: map[string]string{}, StartupSeconds: map[string]string{}}
	for _, n := range []string{"etcd", "kube-apiserver"} {
		fs.Logs[n] = filepath.Join(dir, n+".log")
	}
	var err error
	if opts.karpenterDir == "" {
		if opts.karpenterDir, err = moduleDir(ctx, karpenterModule); err != nil {
			return nil, err
		}
	}
	if opts.kwokDir == "" {
		if opts.kwokDir, err = moduleDir(ctx, kwokModule); err != nil {
			return nil, err
		}
	}
	fs.KarpenterDir, fs.KwokDir = opts.karpenterDir, opts.kwokDir
	for _, b := range []string{"kube-scheduler", "kube-controller-manager", "kwok", "karpenter"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: build with `build.sh --full-stack`", b, binDir)
		}
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	fs.SchedulerPort, fs.ControllerManagerPort = ports[0], ports[1]
	kwokPort, karpMetrics, karpHealth := ports[2], ports[3], ports[4]
	kc := info.Kubeconfig
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The components' self-signed serving certs on 127.0.0.1: a local liveness probe.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	timed := func(name string, f func() error) error {
		t := time.Now()
		if err := f(); err != nil {
			return err
		}
		fs.StartupSeconds[name] = fmt.Sprintf("%.1f", time.Since(t).Seconds())
		return nil
	}

	// kube-scheduler and kube-controller-manager start together; both wait for /healthz.
	if err := startChild(dir, "kube-scheduler", filepath.Join(binDir, "kube-scheduler"),
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--leader-elect=false", "--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", fs.SchedulerPort),
		"--cert-dir="+filepath.Join(dir, "scheduler-certs"),
		fmt.Sprintf("--v=%d", opts.schedulerVerbosity),
	); err != nil {
		return nil, err
	}
	if err := startChild(dir, "kube-controller-manager", filepath.Join(binDir, "kube-controller-manager"),
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--leader-elect=false", "--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", fs.ControllerManagerPort),
		"--cert-dir="+filepath.Join(dir, "kcm-certs"),
		"--service-account-private-key-file="+filepath.Join(dir, "sa.key"),
		"--root-ca-file="+filepath.Join(dir, "ca.crt"),
		"--use-service-account-credentials=false",
		"--v=1",
	); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		name string
		port int
	}{{"kube-scheduler", fs.SchedulerPort}, {"kube-controller-manager", fs.ControllerManagerPort}} {
		fs.Logs[c.name] = filepath.Join(dir, c.name+".log")
		url := fmt.Sprintf("https://127.0.0.1:%d/healthz", c.port)
		if err := timed(c.name, func() error {
			return poll(ctx, c.name+" /healthz", func() error { return httpOK(insecure, url, "") })
		}); err != nil {
			return nil, err
		}
	}

	// Every CRD of Karpenter's KWOK chart, plus the KWOKNodeClass CRD (kwok/apis/crds: the chart
	// dir does not hold it in v1.14.1).
	var crds []string
	for _, pattern := range []string{"kwok/charts/crds/*.yaml", "kwok/apis/crds/*.yaml"} {
		m, _ := filepath.Glob(filepath.Join(opts.karpenterDir, pattern))
		crds = append(crds, m...)
	}
	sort.Strings(crds)
	if err := timed("crds", func() error { return applyCRDFiles(ctx, kc, crds) }); err != nil {
		return nil, err
	}

	// KWOK: the stages joined into one config file.
	var stages bytes.Buffer
	for i, s := range kwokStages {
		b, err := os.ReadFile(filepath.Join(opts.kwokDir, s))
		if err != nil {
			return nil, fmt.Errorf("KWOK stage: %w", err)
		}
		if i > 0 {
			stages.WriteString("\n---\n")
		}
		stages.Write(bytes.TrimSpace(b))
	}
	stagesFile := filepath.Join(dir, "kwok-stages.yaml")
	if err := os.WriteFile(stagesFile, stages.Bytes(), 0o644); err != nil {
		return nil, err
	}
	fs.KwokServer = fmt.Sprintf("127.0.0.1:%d", kwokPort)
	if err := startChild(dir, "kwok", filepath.Join(binDir, "kwok"),
		"--kubeconfig="+kc, "--config="+stagesFile,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.244.0.0/16", "--node-ip=10.0.0.1",
		"--node-lease-duration-seconds=40",
		"--server-address="+fs.KwokServer,
	); err != nil {
		return nil, err
	}
	fs.Logs["kwok"] = filepath.Join(dir, "kwok.log")
	if err := timed("kwok", func() error {
		return poll(ctx, "kwok /healthz", func() error {
			return httpOK(insecure, "http://"+fs.KwokServer+"/healthz", "")
		})
	}); err != nil {
		return nil, err
	}

	// Karpenter (KWOK provider), configured by environment. Its metrics and health servers bind
	// every interface (":port"), so the ports are picked free; nothing connects to them but us.
	fs.KarpenterMetrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", karpMetrics)
	fs.KarpenterHealth = fmt.Sprintf("http://127.0.0.1:%d/readyz", karpHealth)
	env := []string{
		"KUBECONFIG=" + kc,
		"DISABLE_LEADER_ELECTION=true",
		fmt.Sprintf("METRICS_PORT=%d", karpMetrics),
		fmt.Sprintf("HEALTH_PROBE_PORT=%d", karpHealth),
		"BATCH_IDLE_DURATION=1s",
		"BATCH_MAX_DURATION=5s",
		"LOG_LEVEL=" + opts.karpenterLogLevel,
		"CPU_REQUESTS=1000",
	}
	if err := startChildEnv(dir, "karpenter", filepath.Join(binDir, "karpenter"), env); err != nil {
		return nil, err
	}
	fs.Logs["karpenter"] = filepath.Join(dir, "karpenter.log")
	if err := timed("karpenter", func() error {
		return poll(ctx, "karpenter /readyz", func() error {
			return httpOK(http.DefaultClient, fs.KarpenterHealth, "")
		})
	}); err != nil {
		return nil, err
	}

	// Fixtures of Karpenter's E2E suite: the KWOKNodeClass "default" and the NodePool "default".
	if err := timed("fixtures", func() error { return applyFixtures(ctx, kc, opts.karpenterDir) }); err != nil {
		return nil, err
	}
	return fs, nil
}

func dynamicFor(kubeconfigPath string) (dynamic.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(rc)
}

// decodeAll returns the non-empty YAML documents of a file.
func decodeAll(path string) ([]*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// applyCRDFiles server-side applies every CRD in paths and waits until each is Established.
func applyCRDFiles(ctx context.Context, kubeconfigPath string, paths []string) error {
	dyn, err := dynamicFor(kubeconfigPath)
	if err != nil {
		return err
	}
	crdRes := dyn.Resource(crdGVR)
	var names []string
	for _, path := range paths {
		objs, err := decodeAll(path)
		if err != nil {
			return err
		}
		for _, u := range objs {
			if err := serverSideApply(ctx, crdRes, u); err != nil {
				return err
			}
			log.Printf("applied CRD %s", u.GetName())
			names = append(names, u.GetName())
		}
	}
	for _, n := range names {
		if err := poll(ctx, "CRD "+n+" Established", func() error {
			u, err := crdRes.Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return errors.New("not established")
		}); err != nil {
			return err
		}
	}
	return nil
}

func serverSideApply(ctx context.Context, res dynamic.ResourceInterface, u *unstructured.Unstructured) error {
	body, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	force := true
	if _, err := res.Patch(ctx, u.GetName(), types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: "k8s-harness", Force: &force}); err != nil {
		return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// applyFixtures applies test/pkg/environment/common/default_kowknodeclass.yaml and
// default_nodepool.yaml and waits until Karpenter reports the NodePool Ready. (The node class is
// Ready from the start: the KWOKNodeClass CRD defaults its status to a Ready condition, as no
// controller of the KWOK provider manages it.)
func applyFixtures(ctx context.Context, kubeconfigPath, karpenterDir string) error {
	dyn, err := dynamicFor(kubeconfigPath)
	if err != nil {
		return err
	}
	common := filepath.Join(karpenterDir, "test", "pkg", "environment", "common")
	fixtures := []struct {
		file string
		gvr  schema.GroupVersionResource
	}{
		{"default_kowknodeclass.yaml", schema.GroupVersionResource{Group: "karpenter.kwok.sh", Version: "v1alpha1", Resource: "kwoknodeclasses"}},
		{"default_nodepool.yaml", schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}},
	}
	var pools []string
	for _, f := range fixtures {
		objs, err := decodeAll(filepath.Join(common, f.file))
		if err != nil {
			return err
		}
		for _, u := range objs {
			if err := serverSideApply(ctx, dyn.Resource(f.gvr), u); err != nil {
				return err
			}
			log.Printf("applied %s %s (%s)", u.GetKind(), u.GetName(), f.file)
			if f.gvr.Resource == "nodepools" {
				pools = append(pools, u.GetName())
			}
		}
	}
	np := dyn.Resource(schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"})
	for _, name := range pools {
		if err := poll(ctx, "NodePool "+name+" Ready", func() error {
			u, err := np.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			var seen []string
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Ready" && m["status"] == "True" {
					return nil
				}
				seen = append(seen, fmt.Sprintf("%v=%v(%v)", m["type"], m["status"], m["reason"]))
			}
			return fmt.Errorf("conditions %s", strings.Join(seen, ", "))
		}); err != nil {
			return err
		}
	}
	return nil
}
