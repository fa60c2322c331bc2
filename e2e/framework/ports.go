package framework

import (
	"fmt"
	"net"
)

// FreePorts returns n distinct TCP ports that were free a moment ago on every IPv4 address of the
// machine (kube-apiserver binds 0.0.0.0; a port free there is free on 127.0.0.1 too). Another
// process may take one before the caller binds it; the caller then fails with the port in the
// message.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
