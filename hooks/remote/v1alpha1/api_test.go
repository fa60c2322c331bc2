package v1alpha1

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestWireCompatibility pins what hook servers written for koord-runtime-proxy depend on: the package,
// service and method names (the HTTP/2 path of each call), the request and response types, and every
// field's name, number and type. A failure here means api.proto no longer speaks the protocol.
func TestWireCompatibility(t *testing.T) {
	t.Parallel()
	fd := File_api_proto
	if got := fd.Package(); got != "runtime.v1alpha1" {
		t.Fatalf("package = %q, want runtime.v1alpha1", got)
	}

	svc := fd.Services().ByName("RuntimeHookService")
	if svc == nil {
		t.Fatal("service RuntimeHookService is missing")
	}
	methods := []struct{ name, in, out string }{
		{"PreRunPodSandboxHook", "PodSandboxHookRequest", "PodSandboxHookResponse"},
		{"PostStopPodSandboxHook", "PodSandboxHookRequest", "PodSandboxHookResponse"},
		{"PreCreateContainerHook", "ContainerResourceHookRequest", "ContainerResourceHookResponse"},
		{"PreStartContainerHook", "ContainerResourceHookRequest", "ContainerResourceHookResponse"},
		{"PostStartContainerHook", "ContainerResourceHookRequest", "ContainerResourceHookResponse"},
		{"PostStopContainerHook", "ContainerResourceHookRequest", "ContainerResourceHookResponse"},
		{"PreUpdateContainerResourcesHook", "ContainerResourceHookRequest", "ContainerResourceHookResponse"},
	}
	if got := svc.Methods().Len(); got != len(methods) {
		t.Errorf("service has %d methods, want %d", got, len(methods))
	}
	for _, m := range methods {
		md := svc.Methods().ByName(protoreflect.Name(m.name))
		if md == nil {
			t.Errorf("method %s is missing", m.name)
			continue
		}
		if md.IsStreamingClient() || md.IsStreamingServer() {
			t.Errorf("method %s streams; the protocol is unary", m.name)
		}
		if got := string(md.Input().FullName()); got != "runtime.v1alpha1."+m.in {
			t.Errorf("%s takes %s, want runtime.v1alpha1.%s", m.name, got, m.in)
		}
		if got := string(md.Output().FullName()); got != "runtime.v1alpha1."+m.out {
			t.Errorf("%s returns %s, want runtime.v1alpha1.%s", m.name, got, m.out)
		}
	}
	if got, want := RuntimeHookService_PreCreateContainerHook_FullMethodName, "/runtime.v1alpha1.RuntimeHookService/PreCreateContainerHook"; got != want {
		t.Errorf("method path = %s, want %s", got, want)
	}

	type field struct {
		name   string
		number protoreflect.FieldNumber
		kind   string // scalar kind, message name, or "map" / "repeated <message>"
	}
	res := "LinuxContainerResources"
	str := "map<string,string>"
	messages := map[string][]field{
		"PodSandboxMetadata": {{"name", 1, "string"}, {"uid", 2, "string"}, {"namespace", 3, "string"}, {"attempt", 4, "uint32"}},
		"PodSandboxHookRequest": {{"pod_meta", 1, "PodSandboxMetadata"}, {"runtime_handler", 2, "string"}, {"labels", 3, str},
			{"annotations", 4, str}, {"cgroup_parent", 5, "string"}, {"overhead", 6, res}, {"resources", 7, res}},
		"PodSandboxHookResponse": {{"labels", 1, str}, {"annotations", 2, str}, {"cgroup_parent", 3, "string"}, {"resources", 4, res}},
		"LinuxContainerResources": {{"cpu_period", 1, "int64"}, {"cpu_quota", 2, "int64"}, {"cpu_shares", 3, "int64"},
			{"memory_limit_in_bytes", 4, "int64"}, {"oom_score_adj", 5, "int64"}, {"cpuset_cpus", 6, "string"},
			{"cpuset_mems", 7, "string"}, {"hugepage_limits", 8, "repeated HugepageLimit"}, {"unified", 9, str},
			{"memory_swap_limit_in_bytes", 10, "int64"}},
		"HugepageLimit":     {{"page_size", 1, "string"}, {"limit", 2, "uint64"}},
		"ContainerMetadata": {{"name", 1, "string"}, {"attempt", 2, "uint32"}, {"id", 3, "string"}},
		"ContainerResourceHookRequest": {{"pod_meta", 1, "PodSandboxMetadata"}, {"container_mata", 2, "ContainerMetadata"},
			{"container_annotations", 3, str}, {"container_resources", 4, res}, {"pod_resources", 5, res},
			{"pod_annotations", 6, str}, {"pod_labels", 7, str}, {"pod_cgroup_parent", 8, "string"}, {"container_envs", 9, str}},
		"ContainerResourceHookResponse": {{"container_annotations", 1, str}, {"container_resources", 2, res},
			{"pod_cgroup_parent", 3, "string"}, {"container_envs", 4, str}},
	}
	if got := fd.Messages().Len(); got != len(messages) {
		t.Errorf("file has %d messages, want %d", got, len(messages))
	}
	for msg, fields := range messages {
		md := fd.Messages().ByName(protoreflect.Name(msg))
		if md == nil {
			t.Errorf("message %s is missing", msg)
			continue
		}
		if got := md.Fields().Len(); got != len(fields) {
			t.Errorf("%s has %d fields, want %d", msg, got, len(fields))
		}
		for _, f := range fields {
			fdesc := md.Fields().ByName(protoreflect.Name(f.name))
			if fdesc == nil {
				t.Errorf("%s.%s is missing", msg, f.name)
				continue
			}
			if fdesc.Number() != f.number {
				t.Errorf("%s.%s is field %d, want %d", msg, f.name, fdesc.Number(), f.number)
			}
			if got := kindOf(fdesc); got != f.kind {
				t.Errorf("%s.%s is %s, want %s", msg, f.name, got, f.kind)
			}
		}
	}
}

func kindOf(f protoreflect.FieldDescriptor) string {
	switch {
	case f.IsMap():
		return "map<" + f.MapKey().Kind().String() + "," + f.MapValue().Kind().String() + ">"
	case f.IsList() && f.Kind() == protoreflect.MessageKind:
		return "repeated " + string(f.Message().Name())
	case f.IsList():
		return "repeated " + f.Kind().String()
	case f.Kind() == protoreflect.MessageKind:
		return string(f.Message().Name())
	}
	return f.Kind().String()
}
