package main

import (
	"encoding/json"
	"testing"
)

func TestBatchSpec(t *testing.T) {
	t.Parallel()
	var spec struct {
		Containers map[string]struct {
			Requests map[string]string `json:"requests"`
			Limits   map[string]string `json:"limits"`
		} `json:"containers"`
	}
	if err := json.Unmarshal([]byte(batchSpec(2)), &spec); err != nil {
		t.Fatalf("batchSpec is not JSON: %v", err)
	}
	if len(spec.Containers) != 2 || spec.Containers["c0"].Requests["kubernetes.io/batch-cpu"] != "1k" || spec.Containers["c1"].Limits["kubernetes.io/batch-cpu"] != "1500" {
		t.Errorf("batchSpec(2) = %+v", spec)
	}
}

func TestBurstableOOMScoreAdj(t *testing.T) {
	t.Parallel()
	if got := burstableOOMScoreAdj(lsMemRequest); got < 2 || got > 999 {
		t.Errorf("burstableOOMScoreAdj = %d, want within [2, 999]", got)
	}
	if got := burstableOOMScoreAdj(1 << 50); got != 2 {
		t.Errorf("a request above capacity = %d, want 2", got)
	}
}
