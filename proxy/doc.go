// Package proxy is tandem-proxy's CRI server. It listens where kubelet expects a container runtime and
// forwards every call to the real runtime.
//
// One gRPC stream handler sees every call. Calls the proxy does not intercept are relayed as opaque
// frames: they are never decoded, so RPCs newer than the vendored CRI API, streaming RPCs, metadata,
// status codes and error details all pass through untouched. Only the pod and container lifecycle calls
// are decoded, handed to the policy hooks, forwarded, and recorded in the store. Registering the typed
// CRI services instead would stop unknown methods of those services from reaching the fallback handler.
//
// The conversion between CRI's messages and the hooks' types happens here, at the edge (convert.go);
// what tandem-nri does the same way, applying what CRI cannot carry and locking a container while it
// is changed, is package frontend.
package proxy
