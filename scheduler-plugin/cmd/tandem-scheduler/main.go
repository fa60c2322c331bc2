// Command tandem-scheduler is kube-scheduler with Tandem's TandemLoadAware plugin compiled in: run
// it where kube-scheduler runs, with the same flags and a configuration that enables the plugin
// (deploy/scheduler-plugin/kube-scheduler-config.yaml; docs/scheduler-plugin.md).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/tandemkit/tandem/scheduler-plugin/loadaware"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand(app.WithPlugin(loadaware.Name, loadaware.New))))
}
