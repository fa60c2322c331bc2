//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/e2e/framework"
)

// extenderImage is what deploy/extender/daemonset.yaml runs.
const extenderImage = "ghcr.io/tandemkit/tandem-extender:v0.1.0"

// madeImages runs `make images` once per test run, into a directory of its own.
var madeImages = sync.OnceValues(func() (string, error) {
	dir := filepath.Join(binDir(), "make-images")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-C", "..", "images", "BIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make images: %w: %s", err, out)
	}
	return filepath.Join(dir, "images", "tandem-extender.tar"), nil
})

// TestImagesImportAndRun: the tarball `make images` builds is what the install guide imports
// with ctr on a control-plane node; containerd (each flavor, with its own ctr) imports it under
// the name the DaemonSet uses, and runs it through CRI as kubelet would, as the image's
// nonroot user with a read-only root file system.
func TestImagesImportAndRun(t *testing.T) {
	requireRoot(t)
	tarball, err := madeImages()
	if err != nil {
		t.Fatal(err)
	}
	for _, flavor := range flavors() {
		t.Run("containerd-"+flavor, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			_, ctrd := privateContainerd(t, ctx, flavor, "tdm-img-")
			if _, err := ctrd.Ctr(ctx, "images", "import", tarball); err != nil {
				t.Fatal(err)
			}
			out, err := ctrd.Ctr(ctx, "images", "ls", "-q")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), extenderImage+"\n") {
				t.Fatalf("ctr images ls after import:\n%s\nwant %s", out, extenderImage)
			}

			rs, is, err := framework.NewCRIClients(ctx, ctrd.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			// The CRI plugin learns of imported images from an event, not at once.
			var img *runtimeapi.Image
			for deadline := time.Now().Add(30 * time.Second); img == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				st, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: extenderImage}, false)
				if err == nil {
					img = st.GetImage()
				}
			}
			if img == nil {
				t.Fatalf("%s not visible through CRI after import", extenderImage)
			}
			if img.GetUid().GetValue() != 65532 {
				t.Errorf("image runs as uid %v, want 65532 (the DaemonSet's runAsUser)", img.GetUid())
			}

			pod := framework.PodSandboxConfig("extender-image", "e2e", true)
			podID, err := rs.RunPodSandbox(ctx, pod, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				if err := framework.RemovePod(cctx, rs, podID); err != nil {
					t.Errorf("remove pod: %v", err)
				}
			})
			cfg := framework.ContainerConfig("extender")
			cfg.Image = &runtimeapi.ImageSpec{Image: extenderImage, UserSpecifiedImage: extenderImage}
			cfg.Command = nil // the image's entrypoint
			cfg.Args = []string{"--help"}
			cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true, NoNewPrivs: true}
			id, err := rs.CreateContainer(ctx, podID, cfg, pod)
			if err != nil {
				t.Fatal(err)
			}
			if err := rs.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			var st *runtimeapi.ContainerStatus
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				resp, err := rs.ContainerStatus(ctx, id, false)
				if err != nil {
					t.Fatal(err)
				}
				if st = resp.GetStatus(); st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
					break
				}
			}
			logs, _ := os.ReadFile(filepath.Join(pod.LogDirectory, cfg.LogPath))
			if st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 0 {
				t.Fatalf("tandem-extender --help in its image: state %v exit %d, want exited 0; log:\n%s", st.GetState(), st.GetExitCode(), logs)
			}
			if !strings.Contains(string(logs), "--listen") {
				t.Errorf("tandem-extender --help printed no usage:\n%s", logs)
			}
		})
	}
}
