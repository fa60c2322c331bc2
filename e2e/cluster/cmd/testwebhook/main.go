// Command testwebhook is the tier-2 test's stand-in for an admission webhook
// and for an in-cluster API client on the pod network
// (webhookpath_e2e_test.go), so that the cluster's paths for tandem-webhook
// are proven without it. The test builds it statically into an image with
// hack/image, as `make images` builds Tandem's.
//
//	testwebhook serve --cert FILE --key FILE [--addr :9443]
//	    HTTPS: POST /validate answers every AdmissionReview with a denial
//	    naming the object and this pod ($POD_NAME on $NODE_NAME);
//	    GET /healthz answers ok. No keep-alive: each request comes on a new
//	    connection.
//	testwebhook whoami
//	    with in-cluster configuration ($KUBERNETES_SERVICE_HOST/PORT, the
//	    ServiceAccount token, kube-root-ca.crt, the server's certificate
//	    verified), asks the API server who it is (SelfSubjectReview) and its
//	    version, and prints both.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testwebhook:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: testwebhook serve --cert FILE --key FILE [--addr :9443] | whoami")
	}
	switch args[0] {
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		cert := fs.String("cert", "", "serving certificate (PEM)")
		key := fs.String("key", "", "its key (PEM)")
		addr := fs.String("addr", ":9443", "address to listen on")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *cert == "" || *key == "" {
			return errors.New("serve: set --cert and --key")
		}
		return serve(*addr, *cert, *key, stdout)
	case "whoami":
		return whoami(stdout)
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// DenyMessage starts the message of every denial, so that a test tells the
// webhook's answer from any other refusal.
const DenyMessage = "denied by testwebhook"

func serve(addr, cert, key string, stdout io.Writer) error {
	self := os.Getenv("POD_NAME") + " on " + os.Getenv("NODE_NAME")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("POST /validate", validator(self, stdout))
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// The API server picks one of a Service's ready endpoints when it dials
	// (aggregator routing) and then keeps the connection: closing each one
	// makes every review go to a replica picked afresh, so that a test sees
	// each replica answer.
	srv.SetKeepAlivesEnabled(false)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx) //nolint:errcheck // exiting anyway
	}()
	fmt.Fprintf(stdout, "serving on %s as %s\n", addr, self)
	if err := srv.ListenAndServeTLS(cert, key); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// validator answers every AdmissionReview with a denial naming the object
// and self.
func validator(self string, log io.Writer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		req := review.Request
		msg := fmt.Sprintf("%s %s: %s %s %s/%s", DenyMessage, self, req.Operation, req.Kind.Kind, req.Namespace, req.Name)
		fmt.Fprintln(log, msg)
		review.Response = &admissionv1.AdmissionResponse{
			UID:     req.UID,
			Allowed: false,
			Result:  &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: msg},
		}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&review) //nolint:errcheck // the API server sees a broken answer
	})
}

func whoami(stdout io.Writer) error {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	c, err := authenticationclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	review, err := c.SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("SelfSubjectReview at %s: %w", cfg.Host, err)
	}
	body, err := c.RESTClient().Get().AbsPath("/version").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("GET %s/version: %w", cfg.Host, err)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("GET %s/version: %w", cfg.Host, err)
	}
	fmt.Fprintf(stdout, "server %s version %s user %s\n", cfg.Host, v.GitVersion, review.Status.UserInfo.Username)
	return nil
}
