package extender

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	schedv1alpha1 "github.com/tandemkit/tandem/apis/scheduling/v1alpha1"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// probeTimeout bounds the list that tells whether the API server serves reservations at all.
const probeTimeout = 30 * time.Second

// CacheOption adds to what a NodeCache watches.
type CacheOption func(*cacheOptions)

type cacheOptions struct {
	reservations dynamic.Interface
}

// WithReservations makes the cache watch Koordinator Reservations (scheduling.koordinator.sh/v1alpha1)
// through client, so that filter keeps reserved batch room for the reservations' owners and sends
// an owner to its reserved node. Where the API server does not serve the resource (the CRD is not
// installed) or the extender may not read it, the cache logs so once and runs without.
func WithReservations(client dynamic.Interface) CacheOption {
	return func(o *cacheOptions) { o.reservations = client }
}

// heldRoom is one reservation as the cache remembers it: Available on a node and schedulable
// (expiry is checked when deciding, since time moves without events). It is never modified after
// it is stored.
type heldRoom struct {
	name string
	node string
	res  *schedv1alpha1.Reservation
	// batchCPU, batchMemory are the template's kubernetes.io/batch-* requests: milli-cores, bytes.
	batchCPU, batchMemory int64
}

func (h *heldRoom) active(now time.Time) bool { return h.res.Active(metav1.NewTime(now)) }

// takenBy reports whether pod, bound to h's node, has taken the reservation: Koordinator recorded
// it among the current owners, or it is an owner created since the reservation was. The second
// rule keeps a pod of the same controller that already ran on the node from ending the
// reservation its replacement is waiting for.
func (h *heldRoom) takenBy(pod *corev1.Pod) bool {
	for _, o := range h.res.Status.CurrentOwners {
		if o.UID != "" && o.UID == pod.UID {
			return true
		}
	}
	return h.res.IsOwner(pod) && !pod.CreationTimestamp.Before(&h.res.CreationTimestamp)
}

// claims are the reservations holding room for one pod: active, not taken, with the pod among
// their owners. They are worked out once per pod (only for batch pods) and are usually none.
type claims []*heldRoom

func (cl claims) has(h *heldRoom) bool { return slices.Contains(cl, h) }

// activeOn reports whether one of the claims active at now is on node.
func (cl claims) activeOn(node string, now time.Time) bool {
	for _, h := range cl {
		if h.node == node && h.active(now) {
			return true
		}
	}
	return false
}

// anyActive reports whether one of the claims is active at now.
func (cl claims) anyActive(now time.Time) bool {
	for _, h := range cl {
		if h.active(now) {
			return true
		}
	}
	return false
}

// elsewhereMessage is filter's message for the nodes an owner may not go to. It is the same for
// every such node, so kube-scheduler's event groups them.
func (cl claims) elsewhereMessage(now time.Time) string {
	var nodes, names []string
	for _, h := range cl {
		if !h.active(now) {
			continue
		}
		if !slices.Contains(nodes, h.node) {
			nodes = append(nodes, h.node)
		}
		names = append(names, h.name)
	}
	if len(nodes) == 0 {
		return ReasonReservedElsewhere.message()
	}
	what := "node " + nodes[0]
	if len(nodes) > 1 {
		what = "nodes " + strings.Join(nodes, ", ")
	}
	noun := "reservation"
	if len(names) > 1 {
		noun = "reservations"
	}
	return fmt.Sprintf("tandem: room reserved for this pod on %s (%s %s)", what, noun, strings.Join(names, ", "))
}

// reservedFor sums the batch room held on st's node at now: by reservations the pod claims (own)
// and by the others.
func (st *nodeState) reservedFor(cl claims, now time.Time) (ownCPU, ownMemory, otherCPU, otherMemory int64) {
	for _, h := range st.held {
		if !h.active(now) {
			continue
		}
		if cl.has(h) {
			ownCPU += h.batchCPU
			ownMemory += h.batchMemory
		} else {
			otherCPU += h.batchCPU
			otherMemory += h.batchMemory
		}
	}
	return
}

// othersOn names the reservations on st's node that hold room against the pod at now.
func (st *nodeState) othersOn(cl claims, now time.Time) []string {
	var names []string
	for _, h := range st.held {
		if h.active(now) && !cl.has(h) && (h.batchCPU > 0 || h.batchMemory > 0) {
			names = append(names, h.name)
		}
	}
	return names
}

// availableBatch is the batch room the pod may use on st's node at now. Other pods' reservations
// are room it may not take. Its own reservations are room it may take whatever else happened on
// the node since they were made (as a bound pod would hold it), plus what is free besides all
// reservations. Without reservations this is freeBatch.
func (st *nodeState) availableBatch(cl claims, now time.Time) (cpu, memory int64) {
	freeCPU, freeMemory := st.freeBatch()
	if len(st.held) == 0 {
		return freeCPU, freeMemory
	}
	ownCPU, ownMemory, otherCPU, otherMemory := st.reservedFor(cl, now)
	avail := func(free, own, other int64) int64 {
		if own == 0 {
			return free - other
		}
		return own + max(free-other-own, 0)
	}
	return avail(freeCPU, ownCPU, otherCPU), avail(freeMemory, ownMemory, otherMemory)
}

// watchReservations starts an informer on Reservations, unless the API server does not serve
// them or the extender may not read them: then it logs why once and the cache honours none.
func (c *NodeCache) watchReservations(ctx context.Context, client dynamic.Interface) error {
	logger := klog.FromContext(ctx)
	gvr := schedv1alpha1.ReservationsResource
	probeCtx, cancel := context.WithTimeout(ctx, probeTimeout)
	_, err := client.Resource(gvr).List(probeCtx, metav1.ListOptions{Limit: 1})
	cancel()
	switch {
	case apierrors.IsNotFound(err):
		logger.Info("Reservations not served: the CRD scheduling.koordinator.sh reservations is not installed; none honoured",
			"resource", gvr.String(), "fix", "kubectl apply -f deploy/descheduler/crds.yaml, then restart")
		return nil
	case apierrors.IsForbidden(err):
		logger.Info("Reservations not readable: grant get, list and watch on reservations.scheduling.koordinator.sh (deploy/extender/rbac.yaml), then restart; none honoured",
			"resource", gvr.String(), "err", err)
		return nil
	case err != nil:
		// Likely passing (the API server is slow or restarting): the informer retries, and the
		// cache is ready once it has listed them.
		logger.Error(err, "Listing reservations failed; retrying in the informer", "resource", gvr.String())
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	reg, err := factory.ForResource(gvr).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onReservation(logger, obj) },
		UpdateFunc: func(_, obj any) { c.onReservation(logger, obj) },
		DeleteFunc: func(obj any) { c.onReservationDelete(logger, obj) },
	})
	if err != nil {
		return fmt.Errorf("watch reservations: %w", err)
	}
	c.synced = append(c.synced, reg.HasSynced)
	c.reservationsOn = true
	factory.Start(ctx.Done())
	return nil
}

func (c *NodeCache) onReservation(logger klog.Logger, obj any) {
	r, err := schedv1alpha1.ReservationFrom(obj)
	if err != nil {
		logger.V(2).Info("Ignoring reservation that does not decode", "err", err)
		return
	}
	c.setReservation(r)
}

func (c *NodeCache) onReservationDelete(logger klog.Logger, obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	r, err := schedv1alpha1.ReservationFrom(obj)
	if err != nil {
		logger.V(2).Info("Ignoring deleted reservation that does not decode", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeRoomLocked(r.Name)
}

// setReservation stores r if it may hold room (Available on a node, schedulable) and forgets it
// otherwise.
func (c *NodeCache) setReservation(r *schedv1alpha1.Reservation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeRoomLocked(r.Name)
	if r.Status.Phase != schedv1alpha1.ReservationAvailable || r.Status.NodeName == "" || r.Spec.Unschedulable {
		return
	}
	req := r.Requests()
	h := &heldRoom{name: r.Name, node: r.Status.NodeName, res: r}
	if q, ok := req[nodemetric.ResourceBatchCPU]; ok {
		h.batchCPU = q.Value()
	}
	if q, ok := req[nodemetric.ResourceBatchMemory]; ok {
		h.batchMemory = q.Value()
	}
	c.rooms[r.Name] = h
	if c.roomsOn[h.node] == nil {
		c.roomsOn[h.node] = map[string]*heldRoom{}
	}
	c.roomsOn[h.node][r.Name] = h
	c.refreshLocked(h.node)
}

func (c *NodeCache) removeRoomLocked(name string) {
	h, ok := c.rooms[name]
	if !ok {
		return
	}
	delete(c.rooms, name)
	delete(c.roomsOn[h.node], name)
	if len(c.roomsOn[h.node]) == 0 {
		delete(c.roomsOn, h.node)
	}
	c.refreshLocked(h.node)
}

// refreshHeldLocked works out which reservations on node still hold room: those no pod bound
// there has taken. Sorted by name, so messages list them in a stable order.
func (c *NodeCache) refreshHeldLocked(node string) {
	rooms := c.roomsOn[node]
	if len(rooms) == 0 {
		delete(c.held, node)
		return
	}
	held := make([]*heldRoom, 0, len(rooms))
	for _, h := range rooms {
		taken := false
		for _, p := range c.pods[node] {
			if p.pod != nil && h.takenBy(p.pod) {
				taken = true
				break
			}
		}
		if !taken {
			held = append(held, h)
		}
	}
	slices.SortFunc(held, func(a, b *heldRoom) int { return strings.Compare(a.name, b.name) })
	c.held[node] = held
}

// claimsOf returns the reservations holding room for pod at now. Only a batch pod claims
// reservations: the extender counts batch capacity only.
func (c *NodeCache) claimsOf(pod *corev1.Pod, d demand, now time.Time) claims {
	if !d.batch() {
		return nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	var cl claims
	for _, held := range c.held {
		for _, h := range held {
			if h.active(now) && h.res.IsOwner(pod) {
				cl = append(cl, h)
			}
		}
	}
	slices.SortFunc(cl, func(a, b *heldRoom) int { return strings.Compare(a.name, b.name) })
	return cl
}

// activeReservations counts the reservations holding room at now, for the gauge.
func (c *NodeCache) activeReservations(now time.Time) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, held := range c.held {
		for _, h := range held {
			if h.active(now) {
				n++
			}
		}
	}
	return n
}

// ReservationsWatched reports whether the cache watches reservations: it was given a client for
// them and the API server serves them to it.
func (c *NodeCache) ReservationsWatched() bool { return c.reservationsOn }
