package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cgroup trees below are fake because these are unit tests: they must run without root, on any
// kernel, and show layouts this machine does not have (cgroup v2, systemd slices). The real files are
// read in e2e/tandemctl_test.go.

const (
	lse   = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	lsr   = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	ls    = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	be    = "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
	shell = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"

	podLSE = "pod0f7c1a52-4e8b-4d1e-9a55-1c2d3e4f5a01"
	podLSR = "pod0f7c1a52-4e8b-4d1e-9a55-1c2d3e4f5a02"
	podLS  = "pod0f7c1a52-4e8b-4d1e-9a55-1c2d3e4f5a03"
	podBE  = "pod0f7c1a52-4e8b-4d1e-9a55-1c2d3e4f5a04"
)

// v1Tree is the node of Koordinator's documented QoS example (four nginx pods, LSE to BE) on cgroup
// v1 with kubelet's cgroupfs driver, as containerd lays it out:
// /<controller>/kubepods/<qos>/pod<uid>/<container id>, and k8s.io/<id> for a pod without a parent.
// Two things are off, as they are on real nodes now and then: the LS container's cpuset still holds
// the LSE CPUs (the pool update did not reach it), and the BE container has no memory cgroup.
func v1Tree() map[string]string {
	unlimited := "9223372036854771712"
	t := map[string]string{}
	ctr := func(parent, id, cpus, shares, quota, mem string) {
		t["cpu/"+parent+"/"+id+"/cpu.shares"] = shares
		t["cpu/"+parent+"/"+id+"/cpu.cfs_quota_us"] = quota
		t["cpu/"+parent+"/"+id+"/cpu.cfs_period_us"] = "100000"
		t["cpuset/"+parent+"/"+id+"/cpuset.cpus"] = cpus
		if mem != "" {
			t["memory/"+parent+"/"+id+"/memory.limit_in_bytes"] = mem
		}
	}
	ctr("kubepods/burstable/"+podLSE, lse, "0-1", "2048", "200000", unlimited)
	ctr("kubepods/burstable/"+podLSR, lsr, "2-3", "2048", "200000", unlimited)
	ctr("kubepods/burstable/"+podLS, ls, "0-15", "2048", "200000", unlimited)
	ctr("kubepods/besteffort/"+podBE, be, "2-15", "2048", "200000", "")
	ctr("k8s.io", shell, "0-15", "102", "-1", "178257920")
	for pod, idle := range map[string]string{
		"burstable/" + podLSE: "0", "burstable/" + podLSR: "0", "burstable/" + podLS: "0", "besteffort/" + podBE: "1",
	} {
		t["cpu/kubepods/"+pod+"/cpu.idle"] = idle
	}
	return t
}

// v2SystemdTree is the same node on cgroup v2 with kubelet's systemd driver: nested slices and
// containerd's cri-containerd-<id>.scope. The BE container's cpu.max is unlimited although the proxy
// applied 2 CPUs; its cpu.weight follows runc 1.3's mapping, the LSE one the older linear mapping.
func v2SystemdTree() map[string]string {
	t := map[string]string{"cgroup.controllers": "cpuset cpu io memory pids"}
	ctr := func(dir, cpus, weight, max, mem string) {
		t[dir+"/cpu.weight"] = weight
		t[dir+"/cpu.max"] = max
		t[dir+"/cpuset.cpus.effective"] = cpus
		t[dir+"/memory.max"] = mem
	}
	slice := func(qos, pod string) string {
		uid := strings.ReplaceAll(strings.TrimPrefix(pod, "pod"), "-", "_")
		return "kubepods.slice/kubepods-" + qos + ".slice/kubepods-" + qos + "-pod" + uid + ".slice"
	}
	ctr(slice("burstable", podLSE)+"/cri-containerd-"+lse+".scope", "0-1", "79", "200000 100000", "max")
	ctr(slice("besteffort", podBE)+"/cri-containerd-"+be+".scope", "2-15", "174", "max 100000", "1073741824")
	ctr("k8s.io/"+shell, "0-15", "4", "max 100000", "178257920")
	t[slice("burstable", podLSE)+"/cpu.idle"] = "0"
	t[slice("besteffort", podBE)+"/cpu.idle"] = "1"
	return t
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	// Controllers exist even where no container has a cgroup, as on a real v1 host.
	for _, d := range []string{"cpu", "cpuset", "memory"} {
		if _, v2 := files["cgroup.controllers"]; !v2 {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// proxyHandler answers /debug/store and /debug/pools with recorded answers as tandem-proxy does;
// pools "" answers 404 as a proxy whose cpuset policy is off.
func proxyHandler(t *testing.T, storeFile, poolsFile string) http.Handler {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/store", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(read(storeFile))
	})
	mux.HandleFunc("/debug/pools", func(w http.ResponseWriter, _ *http.Request) {
		if poolsFile == "" {
			http.Error(w, "the cpuset policy is off: no CPU topology", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(read(poolsFile))
	})
	mux.HandleFunc("/debug/config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(read("config.json"))
	})
	mux.HandleFunc("/debug/headroom", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(read("headroom.json"))
	})
	mux.HandleFunc("/debug/capacity", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(read("capacity.json"))
	})
	return mux
}

// proxyServer serves proxyHandler on a unix socket, as tandem-proxy serves its debug endpoints, and
// returns the socket's path.
func proxyServer(t *testing.T, storeFile, poolsFile string) string {
	t.Helper()
	return serveSocket(t, proxyHandler(t, storeFile, poolsFile))
}

// serveSocket serves h on a unix socket in a temporary directory and returns its path.
func serveSocket(t *testing.T, h http.Handler) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "debug.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return path
}

// serveTCP serves h on a loopback address, as tandem-proxy serves its --metrics-addr, and returns it.
func serveTCP(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestRunGolden runs tandemctl's commands against recorded proxy answers and fake cgroup trees and
// compares the output with testdata/*.golden, with the tree's temporary root written as $ROOT.
// TANDEMCTL_UPDATE_GOLDEN=1 rewrites the golden files; review the diff before keeping it.
func TestRunGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		store  string
		pools  string
		tree   func() map[string]string
		args   []string
		golden string
		// addr: the proxy is older than --debug-socket and read on its --metrics-addr.
		addr bool
	}{
		{name: "pods cgroup v1", store: "store-cgroupfs.json", tree: v1Tree, args: []string{"pods"}, golden: "pods-v1.golden"},
		{name: "pods from a proxy older than the debug socket", store: "store-cgroupfs.json", tree: v1Tree, args: []string{"pods"}, golden: "pods-v1.golden", addr: true},
		{name: "pods cgroup v1 wide", store: "store-cgroupfs.json", tree: v1Tree, args: []string{"pods", "-o", "wide"}, golden: "pods-v1-wide.golden"},
		{name: "pods with exited containers", store: "store-cgroupfs.json", tree: v1Tree, args: []string{"--all", "pods"}, golden: "pods-v1-all.golden"},
		{name: "pods json", store: "store-cgroupfs.json", tree: v1Tree, args: []string{"-o", "json", "pods"}, golden: "pods-v1.json.golden"},
		{name: "pods cgroup v2 systemd", store: "store-systemd.json", tree: v2SystemdTree, args: []string{"pods"}, golden: "pods-v2-systemd.golden"},
		{name: "pods without a cgroup hierarchy", store: "store-systemd.json", args: []string{"pods"}, golden: "pods-no-cgroups.golden"},
		{name: "pools", store: "store-cgroupfs.json", pools: "pools.json", args: []string{"pools"}, golden: "pools.golden"},
		{name: "pools wide", store: "store-cgroupfs.json", pools: "pools.json", args: []string{"pools", "-o", "wide"}, golden: "pools-wide.golden"},
		{name: "pools json", store: "store-cgroupfs.json", pools: "pools.json", args: []string{"pools", "-o", "json"}, golden: "pools.json.golden"},
		{name: "pools without exclusive CPUs", store: "store-cgroupfs.json", pools: "pools-empty.json", args: []string{"pools"}, golden: "pools-empty.golden"},
		{name: "config", store: "store-cgroupfs.json", args: []string{"config"}, golden: "config.golden"},
		{name: "config wide", store: "store-cgroupfs.json", args: []string{"config", "-o", "wide"}, golden: "config-wide.golden"},
		{name: "config not in force", store: "store-cgroupfs.json", args: []string{"config", "--state", "ignored,refused,unsupported"}, golden: "config-not-in-force.golden"},
		{name: "config json", store: "store-cgroupfs.json", args: []string{"config", "-o", "json", "--state", "refused"}, golden: "config-refused.json.golden"},
		{name: "headroom holding BE on a VM", store: "store-cgroupfs.json", args: []string{"headroom"}, golden: "headroom.golden"},
		{name: "capacity", store: "store-cgroupfs.json", args: []string{"capacity"}, golden: "capacity.golden"},
		{name: "capacity json", store: "store-cgroupfs.json", args: []string{"capacity", "-o", "json"}, golden: "capacity.json.golden"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := []string{"--proxy-debug-socket", proxyServer(t, tc.store, tc.pools)}
			if tc.addr {
				proxy = []string{"--proxy-addr", serveTCP(t, proxyHandler(t, tc.store, tc.pools))}
			}
			root := t.TempDir()
			if tc.tree != nil {
				root = writeTree(t, tc.tree())
			}
			var out bytes.Buffer
			args := append(append(proxy, "--cgroup-root", root), tc.args...)
			if err := run(context.Background(), args, &out); err != nil {
				t.Fatalf("tandemctl %s: %v", strings.Join(tc.args, " "), err)
			}
			got := strings.ReplaceAll(out.String(), root, "$ROOT")
			path := filepath.Join("testdata", tc.golden)
			if os.Getenv("TANDEMCTL_UPDATE_GOLDEN") != "" {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (TANDEMCTL_UPDATE_GOLDEN=1 writes it)", err)
			}
			if got != string(want) {
				t.Errorf("tandemctl %s: output differs from %s\n--- got:\n%s\n--- want:\n%s", strings.Join(tc.args, " "), path, got, want)
			}
		})
	}
}

// TestRunErrors checks that each failure says what to do and makes tandemctl exit non-zero.
func TestRunErrors(t *testing.T) {
	t.Parallel()
	down := filepath.Join(t.TempDir(), "debug.sock")
	newer := serveTCP(t, http.NotFoundHandler())
	tests := []struct {
		name    string
		args    func(t *testing.T) []string
		wantErr string
	}{
		{
			name:    "proxy not running",
			args:    func(*testing.T) []string { return []string{"--proxy-debug-socket", down, "pods"} },
			wantErr: "tandem-proxy does not answer on " + down + " (is it running? set --proxy-debug-socket)",
		},
		{
			name:    "proxy not running, pools",
			args:    func(*testing.T) []string { return []string{"--proxy-debug-socket", down, "pools"} },
			wantErr: "tandem-proxy does not answer on " + down + " (is it running? set --proxy-debug-socket)",
		},
		{
			name: "cpuset policy off",
			args: func(t *testing.T) []string {
				return []string{"--proxy-debug-socket", proxyServer(t, "store-cgroupfs.json", ""), "pools"}
			},
			wantErr: "tandem-proxy has no CPU pools: its cpuset policy is off (the cpuset policy is off: no CPU topology)",
		},
		{
			name: "not a tandem-proxy",
			args: func(t *testing.T) []string {
				return []string{"--proxy-debug-socket", serveSocket(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) })), "pods"}
			},
			wantErr: "(is --proxy-debug-socket tandem-proxy's?)",
		},
		{
			name: "proxy older than /debug/pools",
			args: func(t *testing.T) []string {
				mux := http.NewServeMux()
				mux.HandleFunc("/debug/store", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"pods":[],"containers":[]}`)) })
				return []string{"--proxy-addr", serveTCP(t, mux), "pools"}
			},
			wantErr: "has no /debug/pools: upgrade it",
		},
		{
			name:    "--proxy-addr of a proxy that serves the debug endpoints on its socket",
			args:    func(*testing.T) []string { return []string{"--proxy-addr", newer, "pods"} },
			wantErr: "tandem-proxy on " + newer + " has no /debug/store: it serves its debug endpoints on its --debug-socket, to root alone; set --proxy-debug-socket instead of --proxy-addr",
		},
		{
			name: "proxy failing",
			args: func(t *testing.T) []string {
				return []string{"--proxy-debug-socket", serveSocket(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					http.Error(w, "store locked", http.StatusInternalServerError)
				})), "pods"}
			},
			wantErr: "answered 500 Internal Server Error to /debug/store: store locked",
		},
		{name: "no command", args: func(*testing.T) []string { return nil }, wantErr: "want one command, pods, pools, config, headroom, interference or capacity"},
		{
			name: "unknown state",
			args: func(t *testing.T) []string {
				return []string{"--proxy-debug-socket", proxyServer(t, "store-cgroupfs.json", ""), "config", "--state", "broken"}
			},
			wantErr: `--state "broken": want applied, off, ignored, refused or unsupported`,
		},
		{
			name:    "agent older than /debug/config",
			args:    func(*testing.T) []string { return []string{"--proxy-debug-socket", serveSocketMux(t), "config"} },
			wantErr: "has no /debug/config: upgrade it",
		},
		{name: "unknown command", args: func(*testing.T) []string { return []string{"nodes"} }, wantErr: `unknown command "nodes"`},
		{name: "unknown output", args: func(*testing.T) []string { return []string{"-o", "yaml", "pods"} }, wantErr: `output format "yaml"`},
		{name: "unknown flag", args: func(*testing.T) []string { return []string{"--node", "x", "pods"} }, wantErr: "unknown flag: --node (see tandemctl --help)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := run(context.Background(), tc.args(t), &out)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q on a failure", out.String())
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out); err != nil {
			t.Fatalf("tandemctl %v: %v", args, err)
		}
		for _, want := range []string{"tandemctl [flags] pods", "tandemctl [flags] pools", "--proxy-debug-socket", `(default "/var/lib/tandem/debug.sock")`, "--cgroup-root", "-o, --output"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("tandemctl %v does not mention %q:\n%s", args, want, out.String())
			}
		}
	}
}

// serveSocketMux serves an agent older than /debug/config: only the store.
func serveSocketMux(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/store", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"pods":[],"containers":[]}`)) })
	return serveSocket(t, mux)
}
