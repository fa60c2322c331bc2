//go:build !linux

package collector

import "errors"

type noPerf struct{}

func newPerfOpener() perfOpener { return noPerf{} }

func (noPerf) probe() error { return errors.New("perf events need Linux") }

func (noPerf) openCgroup(string) (counterGroup, error) {
	return nil, errors.New("perf events need Linux")
}
