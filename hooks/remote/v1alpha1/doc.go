// Package v1alpha1 is the Go code generated from api.proto: the messages and the RuntimeHookService of
// the runtime hook protocol that koord-runtime-proxy speaks to hook servers, which Tandem speaks too.
// Edit api.proto and run `make generate`; never edit the generated files.
package v1alpha1
