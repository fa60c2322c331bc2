//go:build !linux

package collector

import "errors"

func loadRunQueueProbe(string, schedOffsets) (rqProbe, error) {
	return nil, errors.New("run-queue latency needs Linux eBPF")
}
