package nodemetric

import (
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// example is the annotation as documented in the package comment; the reporter and the extender
// both depend on this exact spelling.
const example = `{"updateTime":"2026-11-21T06:00:00Z","reportIntervalSeconds":60,` +
	`"nodeUsage":{"cpuMilli":2300,"memoryBytes":8589934592},` +
	`"hpUsage":{"cpuMilli":1800,"memoryBytes":6442450944},` +
	`"reclaimable":{"cpuMilli":3000,"memoryBytes":4294967296}}`

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		value   string
		want    *NodeMetric
		wantErr func(error) bool
		errHas  string
	}{
		{
			name:  "documented example",
			value: example,
			want: &NodeMetric{
				UpdateTime:            time.Date(2026, 11, 21, 6, 0, 0, 0, time.UTC),
				ReportIntervalSeconds: 60,
				NodeUsage:             Resources{CPUMilli: 2300, MemoryBytes: 8 << 30},
				HPUsage:               Resources{CPUMilli: 1800, MemoryBytes: 6 << 30},
				Reclaimable:           Resources{CPUMilli: 3000, MemoryBytes: 4 << 30},
			},
		},
		{
			name:  "unknown keys from a newer reporter are ignored",
			value: `{"updateTime":"2026-11-21T06:00:00Z","reportIntervalSeconds":30,"psi":{"cpu":1}}`,
			want:  &NodeMetric{UpdateTime: time.Date(2026, 11, 21, 6, 0, 0, 0, time.UTC), ReportIntervalSeconds: 30},
		},
		{name: "not JSON", value: `cpu=1`, wantErr: errdefs.IsInvalidArgument, errHas: "not a node metric"},
		{name: "wrong type", value: `{"nodeUsage":{"cpuMilli":"2"}}`, wantErr: errdefs.IsInvalidArgument, errHas: "not a node metric"},
		{name: "no update time", value: `{"reportIntervalSeconds":60}`, wantErr: errdefs.IsInvalidArgument, errHas: "updateTime"},
		{name: "no interval", value: `{"updateTime":"2026-11-21T06:00:00Z"}`, wantErr: errdefs.IsInvalidArgument, errHas: "reportIntervalSeconds"},
		{
			name:    "negative reclaimable",
			value:   `{"updateTime":"2026-11-21T06:00:00Z","reportIntervalSeconds":60,"reclaimable":{"cpuMilli":-5}}`,
			wantErr: errdefs.IsInvalidArgument, errHas: "reclaimable.cpuMilli",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.value)
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Fatalf("Parse() error = %v, want class match", err)
				}
				if !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("Parse() error = %q, want it to name %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			if *got != *tt.want {
				t.Fatalf("Parse() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	t.Parallel()
	m, err := Parse(example)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if s != example {
		t.Fatalf("Marshal() = %s\nwant the documented spelling %s", s, example)
	}
	if _, err := Marshal(&NodeMetric{}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("Marshal(empty) error = %v, want invalid argument", err)
	}
}

func TestFromNode(t *testing.T) {
	t.Parallel()
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if _, err := FromNode(bare); !errdefs.IsNotFound(err) {
		t.Fatalf("FromNode(no annotation) error = %v, want not found", err)
	}
	annotated := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationKey: example}}}
	m, err := FromNode(annotated)
	if err != nil {
		t.Fatal(err)
	}
	if m.Reclaimable.CPUMilli != 3000 {
		t.Fatalf("reclaimable cpu = %d, want 3000", m.Reclaimable.CPUMilli)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(example)
	f.Add(`{}`)
	f.Add(`{"updateTime":"2026-11-21T06:00:00Z","reportIntervalSeconds":1,"hpUsage":{"memoryBytes":1}}`)
	f.Fuzz(func(t *testing.T, value string) {
		m, err := Parse(value)
		if err != nil {
			return
		}
		// Whatever Parse accepts, Marshal must publish, and reading it back must give the same metric.
		s, err := Marshal(m)
		if err != nil {
			t.Fatalf("Marshal(Parse(%q)) error = %v", value, err)
		}
		again, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(Marshal()) error = %v", err)
		}
		if !again.UpdateTime.Equal(m.UpdateTime) || again.NodeUsage != m.NodeUsage || again.HPUsage != m.HPUsage ||
			again.Reclaimable != m.Reclaimable || again.ReportIntervalSeconds != m.ReportIntervalSeconds {
			t.Fatalf("round trip changed %+v into %+v", m, again)
		}
	})
}
