package extender

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// TestDeciderAgreesWithHandler holds the scheduler plugin's answers to the extender's: for each
// pod, the nodes Decider rejects, with the same message and resolvability, are those filter
// rejects over HTTP, and Decider's scores are prioritize's, from one cache at one time. A
// Reservation on cold holds room for web-1's pods there; an expired one on stale holds nothing.
func TestDeciderAgreesWithHandler(t *testing.T) {
	t.Parallel()
	nodes := append(cluster(),
		testNode{name: "nometric", batchCPU: 4000, batchMemory: 8 * gi},
		testNode{name: "strict", metric: metricAt(30*time.Second, 3000, 8*gi, 2500, 6*gi, 3000, 8*gi), thresholds: `{"cpu":30}`, batchCPU: 3000, batchMemory: 8 * gi},
		testNode{name: "nobatch", metric: metricAt(30*time.Second, 1000, 4*gi, 1000, 4*gi, 0, 0), batchCPU: -1},
	)
	pods := []testPod{batchPod("running-be", "cold", "2000", "2Gi"), lsPod("fresh-ls", "hot", "1", "1Gi")}
	s := startExtender(t, DefaultConfig(), nodes, pods, WithReservations(reservationClient(t,
		testReservation{name: "web-1-rsv", node: "cold", controller: "web-1", cpu: "600", memory: "1Gi"},
		testReservation{name: "old-rsv", node: "stale", controller: "web-2", cpu: "600", memory: "1Gi", age: time.Hour},
	)))
	d := NewDecider(DefaultConfig(), s.nodes)
	d.now = func() time.Time { return testNow }
	names := []string{"cold", "hot", "stale", "nometric", "strict", "nobatch", "gone"}

	for _, p := range []testPod{
		batchPod("be-small", "", "500", "1Gi"),
		batchPod("be-large", "", "2500", "1Gi"),
		batchPod("be-memory", "", "100", "12Gi"),
		ownedPod("web-1-owner", "web-1", "1000"),
		ownedPod("web-2-owner", "web-2", "500"),
		lsPod("ls", "", "2", "4Gi"),
		{name: "besteffort"},
		{name: "daemon", daemonSet: true, requests: map[corev1.ResourceName]string{corev1.ResourceCPU: "7"}},
	} {
		t.Run(p.name, func(t *testing.T) {
			pod := p.build()
			code, body := s.post(t, FilterPath, schedulerArgs(t, pod, names, nil))
			if code != http.StatusOK {
				t.Fatalf("filter: status %d: %s", code, body)
			}
			var res extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatal(err)
			}
			passed := map[string]bool{}
			if res.NodeNames != nil {
				for _, n := range *res.NodeNames {
					passed[n] = true
				}
			}
			dem := d.DemandOf(pod)
			for _, n := range names {
				rej := d.Filter(dem, n)
				switch {
				case passed[n] && rej != nil:
					t.Errorf("%s: filter passes it, Decider rejects it: %+v", n, rej)
				case !passed[n] && rej == nil:
					t.Errorf("%s: filter rejects it (%q %q), Decider passes it", n, res.FailedNodes[n], res.FailedAndUnresolvableNodes[n])
				case rej != nil && rej.Resolvable && res.FailedNodes[n] != rej.Message:
					t.Errorf("%s: Decider says resolvable %q, filter's FailedNodes say %q", n, rej.Message, res.FailedNodes[n])
				case rej != nil && !rej.Resolvable && res.FailedAndUnresolvableNodes[n] != rej.Message:
					t.Errorf("%s: Decider says unresolvable %q, filter's FailedAndUnresolvableNodes say %q", n, rej.Message, res.FailedAndUnresolvableNodes[n])
				}
				if rej != nil && d.Explain(dem, n, rej.Reason) == "" {
					t.Errorf("%s: no explanation for %s", n, rej.Reason)
				}
			}

			code, body = s.post(t, PrioritizePath, schedulerArgs(t, pod, names, nil))
			if code != http.StatusOK {
				t.Fatalf("prioritize: status %d: %s", code, body)
			}
			var list extenderv1.HostPriorityList
			if err := json.Unmarshal(body, &list); err != nil {
				t.Fatal(err)
			}
			if len(list) != len(names) {
				t.Fatalf("prioritize answered %d nodes of %d", len(list), len(names))
			}
			for _, hp := range list {
				if got := d.Score(dem, hp.Host); got != hp.Score {
					t.Errorf("%s: Decider scores %d, prioritize %d", hp.Host, got, hp.Score)
				}
			}
		})
	}
}

// TestDeciderRejectsSomething guards the agreement test against agreeing on nothing: the cluster
// it uses must make Decider reject nodes for several reasons and score nodes differently.
func TestDeciderRejectsSomething(t *testing.T) {
	t.Parallel()
	s := startExtender(t, DefaultConfig(), cluster(), nil)
	d := NewDecider(DefaultConfig(), s.nodes)
	d.now = func() time.Time { return testNow }
	dem := d.DemandOf(batchPod("be", "", "2000", "2Gi").build())
	want := map[string]Reason{"cold": "", "hot": ReasonCPUUsage, "stale": ReasonNodeMetricExpired, "gone": ReasonNodeUnknown}
	for n, r := range want {
		rej := d.Filter(dem, n)
		got := Reason("")
		if rej != nil {
			got = rej.Reason
		}
		if got != r {
			t.Errorf("%s: rejected for %q, want %q", n, got, r)
		}
	}
	if !d.Ready() {
		t.Error("Ready is false after the cache synced")
	}
	ls := d.DemandOf(lsPod("web", "", "500m", "1Gi").build())
	if d.Score(ls, "cold") <= d.Score(ls, "hot") {
		t.Errorf("cold scores %d, hot %d: want cold higher", d.Score(ls, "cold"), d.Score(ls, "hot"))
	}
}
