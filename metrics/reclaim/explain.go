package reclaim

import "fmt"

// Term names a term of the formula, as the explanation, the metrics and tandemctl name it.
type Term string

const (
	// TermSafety is capacity × (100 − reclaimThresholdPercent)%, never handed out.
	TermSafety Term = "safety"
	// TermSystem is max(system usage, reserved).
	TermSystem Term = "system"
	// TermHP is the high-priority pods as the calculate policy counts them.
	TermHP Term = "hp"
	// TermCap is batch{CPU,Memory}ThresholdPercent of capacity.
	TermCap Term = "batchThreshold"
	// TermHeadroom is the steal headroom's ceiling on batch CPU.
	TermHeadroom Term = "stealHeadroom"
)

// Bound is, for one resource, the term that decides its batch capacity now, and its amount
// (milli-cores or bytes). A cap or a ceiling that applied decides it outright; otherwise it is the
// largest of the three terms the formula subtracts, the one whose change moves batch capacity most.
type Bound struct {
	Term   Term
	Amount int64
}

// CPUBound is the term that decides batch CPU.
func (r Result) CPUBound() Bound {
	if r.CappedByHeadroom {
		return Bound{TermHeadroom, r.Ceiling}
	}
	return bound(r.Capacity.CPUMilli, r.Safety.CPUMilli, r.System.CPUMilli, r.HP.CPUMilli, r.Cap.CPUMilli, r.Batch.CPUMilli)
}

// MemoryBound is the term that decides batch memory.
func (r Result) MemoryBound() Bound {
	return bound(r.Capacity.MemoryBytes, r.Safety.MemoryBytes, r.System.MemoryBytes, r.HP.MemoryBytes, r.Cap.MemoryBytes, r.Batch.MemoryBytes)
}

func bound(capacity, safety, system, hp, limit, batch int64) Bound {
	if limit > 0 && batch == limit && capacity-safety-system-hp > limit {
		return Bound{TermCap, limit}
	}
	b := Bound{TermSafety, safety}
	if system > b.Amount {
		b = Bound{TermSystem, system}
	}
	if hp > b.Amount {
		b = Bound{TermHP, hp}
	}
	return b
}

// CPUText says in words what decides batch CPU, with the figure, for the Node's annotation and
// tandemctl ("high-priority pods' predicted peak 1.40 cores").
func (b Bound) CPUText() string { return b.text(fmt.Sprintf("%.2f cores", float64(b.Amount)/1000)) }

// MemoryText is CPUText for memory.
func (b Bound) MemoryText() string {
	return b.text(fmt.Sprintf("%.2f GiB", float64(b.Amount)/(1<<30)))
}

func (b Bound) text(amount string) string {
	switch b.Term {
	case TermSafety:
		return "safety margin (100 − reclaimThresholdPercent) " + amount
	case TermSystem:
		return "system usage or reservation " + amount
	case TermHP:
		return "high-priority pods' predicted peak " + amount
	case TermCap:
		return "batchThresholdPercent cap " + amount
	case TermHeadroom:
		return "steal headroom ceiling " + amount
	}
	return string(b.Term) + " " + amount
}
