// up starts an apiserver-tier test control plane (embedded etcd + kube-apiserver) on
// 127.0.0.1, writes kubeconfigs and a JSON ready file, then waits. On SIGTERM/SIGINT it
// stops the children in reverse order and removes its temp dir.
//
// With --full-stack it also starts kube-scheduler, kube-controller-manager, KWOK and
// Karpenter's KWOK provider, applies every Karpenter CRD and the E2E fixtures (fullstack.go).
//
// The binaries are looked up next to this executable (override with --bin-dir).
package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	karpenterModule = "sigs.k8s.io/karpenter@v1.14.1"
	controllerUser  = "noderotation-controller"
)

type readyInfo struct {
	Kubeconfig           string `json:"kubeconfig"`
	ControllerKubeconfig string `json:"controllerKubeconfig"`
	Server               string `json:"server"`
	CAFile               string `json:"caFile"`
	Dir                  string `json:"dir"`
	PID                  int    `json:"pid"`
	EtcdEndpoint         string `json:"etcdEndpoint"`
	ControllerUser       string `json:"controllerUser"`
	// Set with --full-stack only.
	FullStack *fullStackInfo `json:"fullStack,omitempty"`
}

type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

var (
	mu       sync.Mutex
	children []*child
)

func snapshot() []*child {
	mu.Lock()
	defer mu.Unlock()
	return append([]*child(nil), children...)
}

func main() {
	readyFile := flag.String("ready-file", "", "write ready JSON here (default: stdout)")
	binDir := flag.String("bin-dir", "", "directory holding etcd and kube-apiserver (default: next to this binary)")
	karpenterCRDs := flag.Bool("karpenter-crds", false, "apply Karpenter NodePool/NodeClaim CRDs from the Go module cache")
	karpenterDir := flag.String("karpenter-dir", "", "Karpenter module dir (default: .Dir of go mod download -json "+karpenterModule+")")
	crdFiles := flag.String("karpenter-crd-files", "karpenter.sh_nodepools.yaml,karpenter.sh_nodeclaims.yaml", "comma-separated files under kwok/charts/crds/")
	timeout := flag.Duration("timeout", 120*time.Second, "readiness timeout")
	keepDir := flag.Bool("keep-dir", false, "do not remove the temp dir on exit (debugging)")
	verbosity := flag.Int("v", 0, "kube-apiserver log verbosity")
	fullStack := flag.Bool("full-stack", false, "also start kube-scheduler, kube-controller-manager, KWOK and Karpenter (implies every Karpenter CRD)")
	kwokDir := flag.String("kwok-dir", "", "KWOK module dir for the stages (default: .Dir of go mod download -json "+kwokModule+")")
	karpenterLogLevel := flag.String("karpenter-log-level", "debug", "Karpenter LOG_LEVEL (debug, info, error)")
	schedulerVerbosity := flag.Int("scheduler-v", 2, "kube-scheduler log verbosity")
	flag.Parse()
	timeoutSet := false
	flag.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
	if *fullStack && !timeoutSet {
		*timeout = 600 * time.Second // Karpenter's first start on 2 busy cores
	}
	log.SetPrefix("up: ")
	log.SetFlags(log.Ltime | log.Lmicroseconds)

	if *binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			log.Fatal(err)
		}
		*binDir = filepath.Dir(exe)
	}

	dir, err := os.MkdirTemp("", "k8s-harness-")
	if err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	cleanup := func() {
		stopChildren()
		if *keepDir {
			log.Printf("kept %s", dir)
		} else if err := os.RemoveAll(dir); err != nil {
			log.Printf("remove %s: %v", dir, err)
		}
		if *readyFile != "" {
			_ = os.Remove(*readyFile)
		}
	}
	fail := func(format string, args ...any) {
		log.Printf(format, args...)
		for _, n := range []string{"etcd.log", "kube-apiserver.log", "kube-scheduler.log",
			"kube-controller-manager.log", "kwok.log", "karpenter.log"} {
			tailLog(filepath.Join(dir, n))
		}
		cleanup()
		os.Exit(1)
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	startupDone := make(chan struct{})
	go func() { // abort startup on a signal
		select {
		case s := <-sig:
			log.Printf("%v during startup", s)
			cleanup()
			os.Exit(1)
		case <-startupDone:
		}
	}()

	info, err := bringUp(ctx, dir, *binDir, *verbosity)
	if err != nil {
		fail("startup failed: %v", err)
	}
	if *fullStack {
		fs, err := startFullStack(ctx, info, *binDir, fullStackOptions{
			karpenterDir: *karpenterDir, kwokDir: *kwokDir,
			karpenterLogLevel: *karpenterLogLevel, schedulerVerbosity: *schedulerVerbosity,
		})
		if err != nil {
			fail("full stack: %v", err)
		}
		info.FullStack = fs
	} else if *karpenterCRDs {
		if err := applyKarpenterCRDs(ctx, info.Kubeconfig, *karpenterDir, strings.Split(*crdFiles, ",")); err != nil {
			fail("karpenter CRDs: %v", err)
		}
	}
	info.PID = os.Getpid()
	data, _ := json.MarshalIndent(info, "", "  ")
	if *readyFile == "" {
		fmt.Println(string(data))
	} else if err := writeAtomic(*readyFile, append(data, '\n')); err != nil {
		fail("write ready file: %v", err)
	}
	log.Printf("ready in %.1fs: server %s, kubeconfig %s", time.Since(start).Seconds(), info.Server, info.Kubeconfig)

	close(startupDone) // from now on signals are handled below

	childExit := make(chan *child, len(snapshot()))
	for _, c := range snapshot() {
		go func(c *child) { <-c.done; childExit <- c }(c)
	}
	select {
	case s := <-sig:
		log.Printf("%v: shutting down", s)
		cleanup()
	case c := <-childExit:
		fail("%s exited unexpectedly: %v", c.name, c.err)
	}
}

func bringUp(ctx context.Context, dir, binDir string, verbosity int) (*readyInfo, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	// PKI
	caCert, caKey, err := genCA()
	if err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", caCert.Raw); err != nil {
		return nil, err
	}
	srvDER, srvKey, err := genServing(caCert, caKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, "apiserver.crt"), "CERTIFICATE", srvDER); err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, "apiserver.key"), "EC PRIVATE KEY", keyDER); err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, "sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pubDER); err != nil {
		return nil, err
	}

	// Static tokens: an admin (system:masters) and a least-privilege controller identity.
	// The controller line has no groups column: a `""` column would give it the group ""
	// (tokenfile splits it into [""]); without it the user is only system:authenticated.
	adminToken, ctrlToken := randToken(), randToken()
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n%s,%s,%s-uid\n",
		adminToken, ctrlToken, controllerUser, controllerUser)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return nil, err
	}

	// etcd
	etcdDir := filepath.Join(dir, "etcd")
	if err := startChild(dir, "etcd", filepath.Join(binDir, "etcd"),
		"--data-dir="+etcdDir,
		fmt.Sprintf("--client-port=%d", etcdPort),
		fmt.Sprintf("--peer-port=%d", peerPort),
	); err != nil {
		return nil, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	if err := poll(ctx, "etcd /health", func() error {
		return httpOK(http.DefaultClient, etcdURL+"/health", "")
	}); err != nil {
		return nil, err
	}

	// kube-apiserver
	if err := startChild(dir, "kube-apiserver", filepath.Join(binDir, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir="+filepath.Join(dir, "cert-dir"),
		"--tls-cert-file="+filepath.Join(dir, "apiserver.crt"),
		"--tls-private-key-file="+filepath.Join(dir, "apiserver.key"),
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer="+server,
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--disable-admission-plugins=ServiceAccount",
		// 127.0.0.1 is not a valid Endpoints IP; without this the apiserver logs an error
		// every 10s trying to publish itself in default/kubernetes.
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--v=%d", verbosity),
	); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	hc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}},
	}
	if err := poll(ctx, "kube-apiserver /readyz", func() error {
		return httpOK(hc, server+"/readyz", adminToken)
	}); err != nil {
		return nil, err
	}

	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw})
	info := &readyInfo{
		Kubeconfig:           filepath.Join(dir, "admin.kubeconfig"),
		ControllerKubeconfig: filepath.Join(dir, "controller.kubeconfig"),
		Server:               server,
		CAFile:               filepath.Join(dir, "ca.crt"),
		Dir:                  dir,
		EtcdEndpoint:         etcdURL,
		ControllerUser:       controllerUser,
	}
	if err := os.WriteFile(info.Kubeconfig, kubeconfig(server, caPEM, "admin", adminToken), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(info.ControllerKubeconfig, kubeconfig(server, caPEM, controllerUser, ctrlToken), 0o600); err != nil {
		return nil, err
	}

	rc, err := clientcmd.BuildConfigFromFlags("", info.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	for _, ns := range []string{"default", "kube-system", "kube-node-lease"} {
		if err := poll(ctx, "namespace "+ns, func() error {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return err
		}); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// ---- Karpenter CRDs ----

func applyKarpenterCRDs(ctx context.Context, kubeconfigPath, modDir string, files []string) error {
	if modDir == "" {
		cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", karpenterModule)
		cmd.Dir = os.TempDir() // outside any module: never touches a go.mod/go.sum
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("go mod download %s: %w", karpenterModule, err)
		}
		var m struct{ Dir, Error string }
		if err := json.Unmarshal(out, &m); err != nil {
			return err
		}
		if m.Error != "" || m.Dir == "" {
			return fmt.Errorf("go mod download %s: %q", karpenterModule, m.Error)
		}
		modDir = m.Dir
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	crdRes := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	var names []string
	for _, f := range files {
		path := filepath.Join(modDir, "kwok", "charts", "crds", strings.TrimSpace(f))
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			obj := map[string]any{}
			if err := dec.Decode(&obj); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", path, err)
			}
			if len(obj) == 0 {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			body, err := json.Marshal(obj)
			if err != nil {
				return err
			}
			force := true
			if _, err := crdRes.Patch(ctx, u.GetName(), types.ApplyPatchType, body,
				metav1.PatchOptions{FieldManager: "k8s-harness", Force: &force}); err != nil {
				return fmt.Errorf("apply %s: %w", u.GetName(), err)
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

// ---- processes ----

func startChild(dir, name, bin string, args ...string) error {
	return startChildEnv(dir, name, bin, nil, args...)
}

// startChildEnv starts bin with extra environment variables (appended to up's own).
func startChildEnv(dir, name, bin string, env []string, args ...string) error {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	// Own process group: a terminal ^C reaches only `up`, which then stops children in order.
	// Pdeathsig: if `up` is killed hard, the kernel kills the children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		logf.Close()
		close(c.done)
	}()
	mu.Lock()
	children = append(children, c)
	mu.Unlock()
	log.Printf("started %s (pid %d)", name, cmd.Process.Pid)
	return nil
}

func stopChildren() {
	mu.Lock()
	defer mu.Unlock()
	for i := len(children) - 1; i >= 0; i-- {
		c := children[i]
		select {
		case <-c.done:
			continue
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
			log.Printf("stopped %s", c.name)
		case <-time.After(30 * time.Second):
			log.Printf("%s did not stop in 30s, killing", c.name)
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
	children = nil
}

// ---- helpers ----

func poll(ctx context.Context, what string, f func() error) error {
	var last error
	for {
		if last = f(); last == nil {
			return nil
		}
		for _, c := range snapshot() {
			select {
			case <-c.done:
				return fmt.Errorf("waiting for %s: %s exited: %v", what, c.name, c.err)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s: %v", what, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func httpOK(c *http.Client, url, token string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func serial() *big.Int {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return s
}

func genCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "k8s-harness-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func genServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:              []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	return der, key, err
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func kubeconfig(server string, caPEM []byte, user, token string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: k8s-harness
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: %s@k8s-harness
  context:
    cluster: k8s-harness
    user: %s
    namespace: default
current-context: %s@k8s-harness
`, server, base64.StdEncoding.EncodeToString(caPEM), user, token, user, user, user))
}

func tailLog(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	fmt.Fprintf(os.Stderr, "---- tail of %s ----\n%s\n", filepath.Base(path), b)
}
