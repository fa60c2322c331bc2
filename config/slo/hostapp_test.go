package slo

import (
	"reflect"
	"strings"
	"testing"
)

func TestHostApplicationsResolve(t *testing.T) {
	t.Parallel()
	const section = `{
	  "applications": [
	    {"name": "nginx", "priority": "koord-prod", "qos": "LS",
	     "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"}},
	    {"name": "logtail", "qos": "BE"}
	  ],
	  "nodeConfigs": [
	    {"name": "pool-a", "nodeSelector": {"matchLabels": {"pool": "a"}},
	     "applications": [{"name": "agent", "qos": "BE", "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "agent"}}]},
	    {"name": "pool-b", "nodeSelector": {"matchLabels": {"pool": "b"}}}
	  ]
	}`
	cfg, err := parseStrict(map[string]string{HostApplicationConfigKey: section})
	if err != nil {
		t.Fatal(err)
	}
	nginx := HostApplication{Name: "nginx", Priority: "koord-prod", QoS: "LS",
		CgroupPath: &HostCgroupPath{Base: CgroupBaseRoot, ParentDir: "host-latency-sensitive/", RelativePath: "nginx/"}}
	logtail := HostApplication{Name: "logtail", QoS: "BE"}
	agent := HostApplication{Name: "agent", QoS: "BE", CgroupPath: &HostCgroupPath{Base: CgroupBaseKubepodsBesteffort, RelativePath: "agent"}}
	tests := []struct {
		name   string
		labels map[string]string
		want   []HostApplication
	}{
		{"cluster list", nil, []HostApplication{nginx, logtail}},
		// A node config replaces the list whole: agent does not inherit nginx's fields by position.
		{"node config replaces the list", map[string]string{"pool": "a"}, []HostApplication{agent}},
		{"node config without applications means none", map[string]string{"pool": "b"}, []HostApplication{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := cfg.ForNode(tt.labels)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.HostApplications.Applications; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("applications = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestHostApplicationCgroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		app      HostApplication
		wantBase CgroupBase
		wantPath string
	}{
		{"the operator's nginx", HostApplication{Name: "nginx", QoS: "LS", CgroupPath: &HostCgroupPath{Base: CgroupBaseRoot, ParentDir: "host-latency-sensitive/", RelativePath: "nginx/"}},
			CgroupBaseRoot, "host-latency-sensitive/nginx"},
		{"no cgroupPath, LS", HostApplication{Name: "nginx", QoS: "LS"}, CgroupBaseRoot, "host-latency-sensitive/nginx"},
		{"no cgroupPath, BE", HostApplication{Name: "logtail", QoS: "BE"}, CgroupBaseRoot, "host-best-effort/logtail"},
		// As in koordlet: the class directory is the default only when cgroupPath is left out.
		{"cgroupPath without parentDir", HostApplication{Name: "x", QoS: "BE", CgroupPath: &HostCgroupPath{RelativePath: "/x/y/"}}, CgroupBaseRoot, "x/y"},
		{"kubepods base", HostApplication{Name: "x", QoS: "LS", CgroupPath: &HostCgroupPath{Base: CgroupBaseKubepodsBurstable, ParentDir: "p", RelativePath: "x"}},
			CgroupBaseKubepodsBurstable, "p/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base, p := tt.app.Cgroup()
			if base != tt.wantBase || p != tt.wantPath {
				t.Errorf("Cgroup() = %q, %q; want %q, %q", base, p, tt.wantBase, tt.wantPath)
			}
		})
	}
}

func TestHostApplicationsRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		section string
		want    []string
	}{
		{"missing name", `{"applications": [{"qos": "LS", "cgroupPath": {"relativePath": "a"}}]}`,
			[]string{"host-application-config.applications[0].name: missing"}},
		{"duplicate name", `{"applications": [{"name": "a", "qos": "LS"}, {"name": "a", "qos": "BE"}]}`,
			[]string{`host-application-config.applications[1].name: "a" is also the name of applications[0]`}},
		{"LSR refused with the reason", `{"applications": [{"name": "db", "qos": "LSR"}]}`,
			[]string{`host-application-config.applications[0].qos: application "db": LSR is not supported for host applications; use LS or BE`, "exclusive"}},
		{"LSE refused", `{"applications": [{"name": "db", "qos": "LSE"}]}`, []string{`application "db": LSE is not supported`}},
		{"SYSTEM refused", `{"applications": [{"name": "s", "qos": "SYSTEM"}]}`, []string{`application "s": "SYSTEM" is not supported`}},
		{"missing qos", `{"applications": [{"name": "s"}]}`, []string{`applications[0].qos: application "s": missing; set LS or BE`}},
		{"missing relativePath", `{"applications": [{"name": "n", "qos": "LS", "cgroupPath": {"parentDir": "host-latency-sensitive/"}}]}`,
			[]string{`applications[0].cgroupPath.relativePath: application "n": missing`}},
		{"escaping relativePath", `{"applications": [{"name": "n", "qos": "LS", "cgroupPath": {"relativePath": "../../etc"}}]}`,
			[]string{`applications[0].cgroupPath.relativePath: application "n": "../../etc" climbs out with ..`}},
		{"escaping parentDir", `{"applications": [{"name": "n", "qos": "LS", "cgroupPath": {"parentDir": "a/../..", "relativePath": "n"}}]}`,
			[]string{`applications[0].cgroupPath.parentDir: application "n": "a/../.." climbs out`}},
		{"name with a slash and no cgroupPath", `{"applications": [{"name": "a/b", "qos": "LS"}]}`,
			[]string{`applications[0].name: application "a/b": without cgroupPath the name is the cgroup directory`}},
		{"unknown base", `{"applications": [{"name": "n", "qos": "LS", "cgroupPath": {"base": "Root", "relativePath": "n"}}]}`,
			[]string{`applications[0].cgroupPath.base: "Root" is not supported; use one of CgroupRoot, Kubepods, KubepodsBurstable, KubepodsBesteffort`}},
		{"typo in a field", `{"applications": [{"name": "n", "qos": "LS", "cgroupPath": {"relativPath": "n"}}]}`,
			[]string{"host-application-config.applications[0].cgroupPath.relativPath: unknown field"}},
		{"bad node config application", `{"nodeConfigs": [{"name": "a", "nodeSelector": {"matchLabels": {"k": "v"}}, "applications": [{"name": "x", "qos": "LSR"}]}]}`,
			[]string{`host-application-config.nodeConfigs[0].applications[0].qos: application "x": LSR is not supported`}},
		{"node config without selector", `{"nodeConfigs": [{"name": "a", "applications": []}]}`,
			[]string{"host-application-config.nodeConfigs[0].nodeSelector: missing or empty"}},
		{"strategy with a field", `{"applications": [{"name": "n", "qos": "LS", "strategy": {"x": 1}}]}`,
			[]string{"applications[0].strategy.x: unknown field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Parse(map[string]string{HostApplicationConfigKey: tt.section})
			refused := cfg.Refused()
			if len(refused) != 1 || refused[0].Key != HostApplicationConfigKey {
				t.Fatalf("refused = %v, want host-application-config refused", refused)
			}
			if sectionPresent(cfg, HostApplicationConfigKey) {
				t.Error("the refused section was kept")
			}
			for _, w := range tt.want {
				if !strings.Contains(refused[0].Error(), w) {
					t.Errorf("error %q lacks %q", refused[0].Error(), w)
				}
			}
		})
	}
}

// A refused host-application-config keeps the list in force, as every section does.
func TestHostApplicationsKeepLastGood(t *testing.T) {
	t.Parallel()
	good := Parse(map[string]string{HostApplicationConfigKey: `{"applications": [{"name": "nginx", "qos": "LS"}]}`})
	bad := Parse(map[string]string{HostApplicationConfigKey: `{"applications": [{"name": "nginx", "qos": "LSR"}]}`})
	r, err := bad.KeepLastGood(good).ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.HostApplications.Applications; len(got) != 1 || got[0].QoS != "LS" {
		t.Errorf("applications = %+v, want nginx LS kept", got)
	}
}
