package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tandemkit/tandem/kubeclient"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/metrics/reporter"
)

// NodePatcher patches a Node; kubeclient.Client is one.
type NodePatcher interface {
	PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) error
}

// Withdraw takes off the Node what the agent published there: the batch resources of its status and
// the node-metric annotation. Left behind, kube-scheduler would keep placing batch pods on a node no
// agent serves, and tandem-extender would keep judging it by the last usage the agent measured, until
// that went stale (nodeMetricExpirationSeconds, 10 minutes by default).
func Withdraw(ctx context.Context, c NodePatcher, nodeName string) error {
	status, err := reporter.StatusPatch(false, reclaim.Resources{}, nil)
	if err != nil {
		return err
	}
	if err := c.PatchNode(ctx, nodeName, types.StrategicMergePatchType, status, "status"); err != nil {
		return fmt.Errorf("take the batch resources off Node %s: %w", nodeName, err)
	}
	annotation, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{nodemetric.AnnotationKey: nil}}})
	if err != nil {
		return err
	}
	if err := c.PatchNode(ctx, nodeName, types.MergePatchType, annotation); err != nil {
		return fmt.Errorf("take the %s annotation off Node %s: %w", nodemetric.AnnotationKey, nodeName, err)
	}
	return nil
}

// KubeNodePatcher is the Node client Withdraw uses on a node: the node's own credentials, which may
// patch its own Node (the Node authorizer and NodeRestriction allow no other).
func KubeNodePatcher(kubeconfig string) (NodePatcher, error) {
	rc, err := kubeclient.Config(kubeconfig)
	if err != nil {
		return nil, err
	}
	c, err := kubeclient.New(rc, "tandemctl")
	if err != nil {
		return nil, err
	}
	return patcher{c}, nil
}

type patcher struct{ c *kubeclient.Client }

func (p patcher) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) error {
	_, err := p.c.PatchNode(ctx, name, pt, data, subresources...)
	return err
}

// NodeName is the node's name as tandem-proxy defaults it: the given one, else the lowercased hostname,
// as kubelet registers a node.
func NodeName(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("find the node's name (pass --node-name): %w", err)
	}
	return strings.ToLower(h), nil
}
